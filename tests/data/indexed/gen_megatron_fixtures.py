#!/usr/bin/env python3
"""Writes the indexed-dataset fixtures with Megatron-Core's own IndexedDatasetBuilder.

Run once by hand (the outputs are committed; CI never runs this):
    pip install megatron-core numpy   # megatron-core 0.16.1 was used
    python3 tests/data/indexed/gen_megatron_fixtures.py tests/data/indexed

megatron.core.datasets.indexed_dataset imports torch only for type annotations and the Dataset
base class, so a stub torch module lets the real writer run without installing PyTorch; the package
__init__ (which needs torch for real) is bypassed by registering the packages by path.
Each fixture <name>.{bin,idx} comes with <name>.expect, the content in plain text:
    dtype <code>
    documents <document_indices...>
    modes <sequence_modes...>        (multimodal fixture only)
    seq <token ids...>               (one line per sequence, in order)
"""
import os
import sys
import types

import numpy


def load_megatron_indexed_dataset():
    import importlib.util

    spec = importlib.util.find_spec("megatron")
    root = list(spec.submodule_search_locations)[0]

    def stub(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m
        return m

    torch = stub("torch")
    torch.utils = stub("torch.utils")
    torch.utils.data = stub("torch.utils.data", Dataset=object)
    torch.Tensor = object
    stub("megatron", __path__=[root])
    stub("megatron.core", __path__=[os.path.join(root, "core")])
    stub("megatron.core.datasets", __path__=[os.path.join(root, "core", "datasets")])
    stub("megatron.core.utils", log_single_rank=lambda *a, **k: None)
    import megatron.core.datasets.indexed_dataset as idx

    return idx


class Tensor:
    """What IndexedDatasetBuilder.add_item needs from a torch tensor."""

    def __init__(self, values):
        self.values = numpy.array(values)

    def numpy(self):
        return self.values


def documents_for(dtype):
    info = numpy.iinfo(dtype) if numpy.issubdtype(dtype, numpy.integer) else None
    lo, hi = (info.min, info.max) if info else (-(2**24), 2**24)
    rng = numpy.random.RandomState(7)
    docs = [
        [[1, 2, 3]],
        [[5, 6], [7], []],  # a document of three sequences, one of them empty
        [list(rng.randint(0, min(hi, 1000), size=40))],
        [[lo, hi, 0, hi - 1]],  # the extremes of the dtype survive the round trip
    ]
    return docs


def write(idx, out_dir, name, dtype, docs, modes=None):
    prefix = os.path.join(out_dir, name)
    builder = idx.IndexedDatasetBuilder(prefix + ".bin", dtype=dtype, multimodal=modes is not None)
    expect = []
    k = 0
    for doc in docs:
        for seq in doc:
            if modes is None:
                builder.add_item(Tensor(numpy.array(seq, dtype=dtype)))
            else:
                builder.add_item(Tensor(numpy.array(seq, dtype=dtype)), modes[k])
            k += 1
            expect.append("seq " + " ".join(str(int(t)) for t in seq))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    bounds = [0]
    for doc in docs:
        bounds.append(bounds[-1] + len(doc))
    header = ["dtype %d" % idx.DType.code_from_dtype(dtype),
              "documents " + " ".join(map(str, bounds))]
    if modes is not None:
        header.append("modes " + " ".join(map(str, modes)))
    with open(prefix + ".expect", "w") as f:
        f.write("\n".join(header + expect) + "\n")


def main():
    out_dir = sys.argv[1]
    idx = load_megatron_indexed_dataset()
    for dtype in [numpy.uint8, numpy.int8, numpy.int16, numpy.int32, numpy.int64, numpy.float64,
                  numpy.float32, numpy.uint16]:
        write(idx, out_dir, "megatron_" + numpy.dtype(dtype).name, dtype, documents_for(dtype))
    write(idx, out_dir, "megatron_multimodal", numpy.uint16, [[[1, 2], [3]], [[4, 5, 6]]],
          modes=[0, 1, 0])
    # Megatron's own merge path (add_index) concatenates two datasets' indices.
    a = os.path.join(out_dir, "megatron_uint16")
    builder = idx.IndexedDatasetBuilder(os.path.join(out_dir, "megatron_merged.bin"),
                                        dtype=numpy.uint16)
    builder.add_index(a)
    builder.add_index(a)
    builder.finalize(os.path.join(out_dir, "megatron_merged.idx"))
    with open(a + ".expect") as f:
        lines = f.read().split("\n")
    seqs = [l for l in lines if l.startswith("seq")]
    docs = [int(x) for x in lines[1].split()[1:]]
    n = docs[-1]
    merged = docs + [d + n for d in docs[1:]]
    with open(os.path.join(out_dir, "megatron_merged.expect"), "w") as f:
        f.write("\n".join([lines[0], "documents " + " ".join(map(str, merged))] + seqs + seqs)
                + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes a small safetensors file with the reference implementation, for the C reader's test
(tests/unit/hf/test_safetensors.c), which checks every value against the formulas below. Rerun
only when the cases change (CI reads the committed file):

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install safetensors==0.4.5 numpy==2.4.6
    /tmp/venv/bin/python tests/reference/make_safetensors_fixtures.py

Tensors: "a.f32" [2, 3] = 0.5 * k; "b.f16" [4] = (k - 1.5) / 4; "c.i64" [3] = 1, -2, 2^40;
"d.u8" [5] = 250 + k; "e.f64" [] = 3.25; "f.empty" [0, 7] float32; metadata format=pt,
trestle=fixture. k counts elements in row-major order.
"""
import os

import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))

tensors = {
    "a.f32": (0.5 * np.arange(6, dtype=np.float32)).reshape(2, 3),
    "b.f16": ((np.arange(4, dtype=np.float32) - 1.5) / 4).astype(np.float16),
    "c.i64": np.array([1, -2, 2**40], dtype=np.int64),
    "d.u8": (250 + np.arange(5)).astype(np.uint8),
    "e.f64": np.array(3.25, dtype=np.float64),
    "f.empty": np.zeros((0, 7), dtype=np.float32),
}
save_file(tensors, os.path.join(HERE, "fixtures", "small.safetensors"),
          metadata={"format": "pt", "trestle": "fixture"})

#!/usr/bin/env python3
"""Prints the prose half of data/english_corpus.txt: the docstrings (200+ characters, each once)
of a fixed list of Python 3.11 standard-library modules, their classes, functions and methods.
The other half is Debian's /usr/share/common-licenses (see data/README.md). Usage:

    python3 data/make_corpus_docstrings.py > /tmp/docstrings.txt
"""
import importlib, inspect, textwrap, sys
MODS = ["argparse","asyncio","base64","bisect","calendar","collections","contextlib","copy","csv","dataclasses",
        "datetime","decimal","difflib","email","enum","fractions","functools","gettext","gzip","hashlib","heapq",
        "http.client","imaplib","inspect","io","ipaddress","itertools","json","logging","mailbox","math","operator",
        "optparse","os","pathlib","pickle","pprint","queue","random","re","sched","secrets","shelve","shlex","shutil",
        "smtplib","socket","sqlite3","statistics","string","subprocess","tarfile","tempfile","textwrap","threading",
        "timeit","tokenize","traceback","turtle","typing","unittest","urllib.parse","urllib.request","uuid","warnings",
        "weakref","wave","xml.dom.minidom","zipfile","zoneinfo"]
seen = set(); out = []
def add(doc):
    if not isinstance(doc, str): return
    doc = inspect.cleandoc(doc)
    if len(doc) < 200 or doc in seen: return
    seen.add(doc); out.append(doc)
for name in MODS:
    try: m = importlib.import_module(name)
    except Exception: continue
    add(m.__doc__)
    for _, obj in sorted(vars(m).items()):
        if getattr(obj, "__module__", None) != m.__name__: continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            add(obj.__doc__)
            if inspect.isclass(obj):
                for _, meth in sorted(vars(obj).items()):
                    if inspect.isfunction(meth): add(meth.__doc__)
sys.stdout.write("\n\n".join(out) + "\n")

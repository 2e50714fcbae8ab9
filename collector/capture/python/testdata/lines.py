"""Prints, as JSON, the line tables of code objects in a few modules and
the line CPython itself gives each bytecode offset, for the python
package's decoder tests."""
import dis
import json
import sys
import types
import asyncio.base_events
import json.decoder
import threading

out = []


def visit(code):
    if sys.version_info >= (3, 10):
        table = code.co_linetable
        ranges = [[s, e, -1 if l is None else l] for s, e, l in code.co_lines()]
    else:
        table = code.co_lnotab
        starts = list(dis.findlinestarts(code))
        ranges = []
        for i, (off, line) in enumerate(starts):
            end = starts[i + 1][0] if i + 1 < len(starts) else len(code.co_code)
            ranges.append([off, end, line])
    out.append({"name": code.co_name, "first": code.co_firstlineno, "table": table.hex(), "ranges": ranges})
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            visit(c)


for mod in (asyncio.base_events, json.decoder, threading):
    with open(mod.__file__) as f:
        visit(compile(f.read(), mod.__file__, "exec"))
json.dump(out, sys.stdout)

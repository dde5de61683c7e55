"""The pytree engine (compiled by mypyc; the same source runs uncompiled).

Layout, one module per concern:

- ``_keys``      key-path entries (DictKey, SequenceKey, GetAttrKey, FlattenedIndexKey), keystr
- ``_registry``  node kinds, the type registry, registration functions, expand/build of one node
- ``_treedef``   PyTreeDef: a flat pre-order node table, with unflatten / flatten_up_to / repr
- ``_traverse``  the walkers: flatten, flatten_with_path, map, map_with_path, iter
- ``_pure``      the uncompiled build's one-tree map (never compiled; see its docstring)
- ``_errors``    structure-mismatch and cycle messages (key path + both sides)
- ``_ops``       everything built on the walkers: reduce, transpose, broadcast, partition, ...

The walkers recurse for the first ``_errors.DEEP`` levels (1,024 compiled, 16 uncompiled) and
carry on deeper subtrees with an explicit frame stack, so no input depth can exhaust the C stack,
compiled or not.  Cycle detection starts only once a walk is deeper than ``DEEP`` levels, so
ordinary trees never pay for it.
"""

"""The pytree engine (compiled by mypyc; the same source runs uncompiled).

Layout, one module per concern:

- ``_keys``      key-path entries (DictKey, SequenceKey, GetAttrKey, FlattenedIndexKey), keystr
- ``_kinds``     node kinds (the low bits of a node's code) and how registered nodes flatten
- ``_nodes``     node data: NodeInfo (per type), DictData, CustomData, the total order of dict keys
- ``_registry``  the type registry (classification cache), registration namespaces,
                 dict_insertion_ordered and the ``register_*`` functions
- ``_expand``    expand / build / match_children: one node apart and back together
- ``_text``      type names and clipped text for messages
- ``_treedef``   PyTreeDef: a flat pre-order node table; eq, hash, queries, flatten_up_to, paths
- ``_unflatten`` the two unflatten algorithms of a node table (one backward pass; the plan)
- ``_treetext``  a PyTreeDef's repr text and its pickled state (validated on the way in)
- ``_spec``      optree's PyTreeSpec surface of a PyTreeDef (entries, walk/traverse, transform, ...)
- ``_kindenum``  PyTreeKind, optree's enum of node kinds (never compiled)
- ``_traverse``  the public walks: flatten, leaves, flatten_with_path, map, map_with_path, iter
- ``_walker``    the one iterative walker (leaves, node table, key paths, n-tree map)
- ``_depth``     how deep walks recurse, which build runs, the depth limit, internal signals
- ``_pure``      the uncompiled build's one-tree map (never compiled; see its docstring)
- ``_errors``    structure-mismatch and cycle messages (key path + both sides)
- ``_ops``       everything built on the walkers: reduce, transpose, broadcast, partition, ...

The public walks recurse for the first ``_depth.DEEP`` levels (1,024 compiled, 16 uncompiled)
and hand deeper subtrees to the iterative walker, so no input depth can exhaust the C stack,
compiled or not.  The recursion keeps no ancestors: a cycle or a mismatch is named by walking
again (``_errors``).

A walk in a registration namespace, or with dicts in insertion order (``dict_insertion_ordered``),
is a ``Walker`` from the root reading the namespace's view of the registry (``_registry.Namespace``);
the global walk only tests its ``namespace`` argument and one flag, so namespaces cost it nothing
measurable.
"""

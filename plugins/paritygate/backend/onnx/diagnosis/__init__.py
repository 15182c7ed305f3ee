"""A failing fp16 / int8 artifact explained: ``localize`` (where precision breaks, node by node, ranked by the error
each node adds) and ``repair`` (the search for the nodes to keep in FP32 or leave unquantized so that the check
passes)."""

"""Graph helpers every ONNX rewrite shares: ``scopes`` (walks, readers and renames through ``Loop`` / ``Scan`` /
``If`` subgraphs), ``names`` (every name a model uses; fresh names), ``dtypes`` (the ``onnx.TensorProto`` element
types the rewrites name, defined once)."""

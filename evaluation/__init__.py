"""The evaluation (docs/eval.md): a question set written from the PEP texts, run through the public
read verbs (search, expand_neighbors, fetch_slice, context) as one reader (docs/eval.md)."""

"""The evaluation of issue 12: a question set written from the PEP texts, run through the public
read verbs (search, expand_neighbors, fetch_slice, context) as one reader (docs/eval.md)."""

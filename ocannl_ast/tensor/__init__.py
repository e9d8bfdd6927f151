"""The tensor layer: `node` (graph node, records) <- `builders`, `leaves`, `ops` (the op
library) <- `train`, `dsl`; `pipeline` compiles Code to a loop program, `context` runs it.
Input: user expressions and @op / @cd code. Output: routines and NumPy arrays."""

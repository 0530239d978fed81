"""RASP programs that encode the theorems' constructions, one module per task family."""

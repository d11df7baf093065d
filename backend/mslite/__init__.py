# Packaging marker only: Triton imports model.py from this directory as the top-level module `model`.

"""The ``reference`` target: the numpy interpreter of the IR (the ground truth)."""

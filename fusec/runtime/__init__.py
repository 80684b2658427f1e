"""Reference runtime of fusec."""

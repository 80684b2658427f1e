"""Back-end targets of fusec, one package per target."""

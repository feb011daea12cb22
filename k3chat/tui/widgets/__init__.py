"""One widget per file; each keeps its intrinsic layout in `DEFAULT_CSS`."""

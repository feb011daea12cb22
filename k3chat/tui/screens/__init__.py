"""Screens; each loads the `.tcss` file next to it through `CSS_PATH`."""

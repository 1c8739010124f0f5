"""The controller's steps, one module each: dates, decompose, search, drill, reflect, converge, notes, answer."""

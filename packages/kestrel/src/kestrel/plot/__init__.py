"""``kestrel plot``: corner plots of sample files and predictive bands."""

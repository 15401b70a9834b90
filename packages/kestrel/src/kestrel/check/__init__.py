"""``kestrel check calibration``: the command's simulations and its figure."""

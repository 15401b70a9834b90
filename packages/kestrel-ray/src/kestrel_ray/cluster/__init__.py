"""Ray for Kestrel: starting or joining it, the driver's import directories, actor resources."""

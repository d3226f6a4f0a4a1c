"""The Ray side: the only package that imports `ray`."""

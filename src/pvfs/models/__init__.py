"""Models the I/O daemons and tools reason with: the emulated disk's presets (``disk``) and
the reactive-scheduling model and selector of the thesis' chapter 5 (``rs``)."""

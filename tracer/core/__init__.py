"""The decoder's arithmetic: the config and its table of block entries, the equations and their derivatives,
the parameters and their fast layout, recording and holding values, the forward and backward passes, and
models bigger than memory. Imports numpy and the standard library only."""

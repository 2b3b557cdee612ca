"""Files: reading what someone gave us (bounded), writing atomically, GGUF files and their storage types,
and the tensors as stored until expanded. Imports numpy and the standard library only."""

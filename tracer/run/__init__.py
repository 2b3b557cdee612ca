"""Running a model: the generation settings and loop, sampling, the logit lens, interventions, the trace
and its file, training and its corpus, what heads do, where a run overflowed, stated values checked."""

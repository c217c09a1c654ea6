# Content-addressed payload store and checkpoints.

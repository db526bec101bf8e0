# TEST DOUBLE: a stand-in for verl's `verl.model_merger` package (see __main__.py). Mounted by the export-hf
# tests at /verl/verl/model_merger in the test image, whose /verl/verl shadow package has no model merger.

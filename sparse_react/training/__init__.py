"""Training: exporting and relabelling episodes, packing them, fine-tuning, self-play rounds, the
cards written beside a trained model, and the stages that chain them."""

"""Benchmarks: retrieval (substrate), LongMemEval and LoCoMo question answering."""

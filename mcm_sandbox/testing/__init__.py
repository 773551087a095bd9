"""Test kits: helpers the tests, benchmarks and the demo share; they import the product, never the reverse."""

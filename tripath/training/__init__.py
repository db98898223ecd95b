"""The tiny draft / target / needle models: their corpora (built here, no download), training and model card."""

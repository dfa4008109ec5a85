"""The report about a user's own model (rnn-compat report --model): its files run in their frameworks, trained models and their exports, correct and broken, and the refusals."""

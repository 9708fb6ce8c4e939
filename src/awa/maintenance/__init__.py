"""Fleet maintenance run by one elected worker: promotion, rescue, pruning."""

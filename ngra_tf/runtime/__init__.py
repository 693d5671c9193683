"""Where a graph's data lives while it trains, and what that costs in memory."""

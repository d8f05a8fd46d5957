package main

import "log/slog"

// logAttr rewrites an attribute before a log handler writes it.
func logAttr(_ []string, a slog.Attr) slog.Attr { return a }

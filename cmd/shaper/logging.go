package main

import "log/slog"

// logAttr rewrites an attribute before a log handler writes it, at the top
// level or inside a group. A duration becomes its Go string ("30s",
// "1.5ms"), the form the config takes: the JSON handler would write it as
// a count of nanoseconds (the text handler already writes the string).
func logAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

package shaper

import "testing"

func TestBearerMatchesOnlyTheExactToken(t *testing.T) {
	const token = "s3cret-admin-token"
	tests := []struct {
		header string
		want   bool
	}{
		{"Bearer " + token, true},
		{"bearer " + token, true}, // the scheme is case-insensitive
		{"BEARER " + token, true},
		{"Bearer " + token + " ", false},
		{"Bearer  " + token, false},
		{"Bearer " + token[:len(token)-1], false},
		{"Bearer " + token + "x", false},
		{"Basic " + token, false},
		{token, false},
		{"Bearer", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := bearerMatches(tt.header, token); got != tt.want {
			t.Errorf("bearerMatches(%q) = %v; want %v", tt.header, got, tt.want)
		}
	}
}

package sources

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestEncodeFinishedWritesRunsAboveTheBaseLowestFirst(t *testing.T) {
	tests := []struct {
		name string
		base int64
		give []offsetRange
		max  int
		want string
	}{
		{
			name: "nothing finished",
			base: 10,
			max:  kafkaMetadataMax,
			want: "",
		},
		{
			name: "two holes",
			base: 10,
			give: []offsetRange{{11, 49}, {51, 99}},
			max:  kafkaMetadataMax,
			want: "s1:10:1+39,1+49",
		},
		{
			name: "longer unfinished stretches",
			base: 0,
			give: []offsetRange{{3, 3}, {10, 19}},
			max:  kafkaMetadataMax,
			want: "s1:0:3+1,6+10",
		},
		{
			name: "touching runs merge",
			base: 5,
			give: []offsetRange{{6, 7}, {8, 9}, {10, 12}},
			max:  kafkaMetadataMax,
			want: "s1:5:1+7",
		},
		{
			name: "overlapping runs merge",
			base: 5,
			give: []offsetRange{{6, 9}, {8, 12}, {14, 14}},
			max:  kafkaMetadataMax,
			want: "s1:5:1+7,1+1",
		},
		{
			name: "offsets at or below the base are left out",
			base: 20,
			give: []offsetRange{{1, 15}, {18, 22}, {30, 30}},
			max:  kafkaMetadataMax,
			want: "s1:20:1+2,7+1",
		},
		{
			name: "runs that do not fit are left out, the lowest kept",
			base: 10,
			give: []offsetRange{{11, 49}, {51, 99}, {101, 149}},
			max:  len("s1:10:1+39,1+49"),
			want: "s1:10:1+39,1+49",
		},
		{
			name: "one byte short of the second run",
			base: 10,
			give: []offsetRange{{11, 49}, {51, 99}},
			max:  len("s1:10:1+39,1+49") - 1,
			want: "s1:10:1+39",
		},
		{
			name: "not even the first run fits",
			base: 10,
			give: []offsetRange{{11, 49}},
			max:  len("s1:10:1+39") - 1,
			want: "",
		},
		{
			name: "no room at all",
			base: 10,
			give: []offsetRange{{11, 49}},
			max:  0,
			want: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := encodeFinished(tt.base, tt.give, tt.max); got != tt.want {
				t.Errorf("encodeFinished(%d, %v, %d) = %q; want %q", tt.base, tt.give, tt.max, got, tt.want)
			}
		})
	}
}

// Metadata of another format, another offset or garbled is an error that
// says why, and gives no runs at all, not even those that parsed before the
// fault: the caller then skips nothing, so nothing is lost.
func TestParseFinishedReadsItsOwnFormatAndRejectsAnythingElseWhole(t *testing.T) {
	tests := []struct {
		name      string
		committed int64
		give      string
		want      []offsetRange
		wantErr   string // in the error; "" for none
	}{
		{name: "two holes", committed: 10, give: "s1:10:1+39,1+49", want: []offsetRange{{11, 49}, {51, 99}}},
		{name: "one run", committed: 0, give: "s1:0:3+1", want: []offsetRange{{3, 3}}},
		{name: "empty", committed: 10, give: ""},
		{name: "no runs", committed: 10, give: "s1:10:", wantErr: "no runs"},
		{name: "another tool's text", committed: 10, give: "consumer-7 at 2024-01-01T00:00:00Z", wantErr: `not this source's format: no "s1:" prefix`},
		{name: "a later version", committed: 10, give: "s2:10:1+39", wantErr: "not this source's format"},
		{name: "no base", committed: 10, give: "s1:1+39", wantErr: "no committed offset"},
		{name: "base of another offset", committed: 11, give: "s1:10:1+39", wantErr: "written for offset 10, not for the committed offset 11"},
		{name: "negative base", committed: -1, give: "s1:-1:1+39", wantErr: `committed offset "-1" is not an offset`},
		{name: "skip 0", committed: 10, give: "s1:10:0+39", wantErr: `run 1 "0+39": skip and count must be at least 1`},
		{name: "count 0", committed: 10, give: "s1:10:1+0", wantErr: "at least 1"},
		{name: "negative count", committed: 10, give: "s1:10:1+-3", wantErr: "at least 1"},
		{name: "missing count", committed: 10, give: "s1:10:1+", wantErr: "in decimal"},
		{name: "missing plus", committed: 10, give: "s1:10:139", wantErr: `run 1 "139": not <skip>+<count>`},
		{name: "trailing comma", committed: 10, give: "s1:10:1+39,", wantErr: `run 2 ""`},
		{name: "not a number", committed: 10, give: "s1:10:1+3x", wantErr: "in decimal"},
		{name: "hexadecimal", committed: 10, give: "s1:10:0x1+3", wantErr: "in decimal"},
		{name: "spaces", committed: 10, give: "s1:10: 1+3", wantErr: "in decimal"},
		{name: "offsets past the largest", committed: 10, give: "s1:10:9223372036854775800+1", wantErr: "past the largest offset"},
		{name: "count past the largest", committed: 10, give: "s1:10:1+9223372036854775798", wantErr: "past the largest offset"},
		{name: "a run after the largest offset", committed: 10, give: "s1:10:1+9223372036854775797,1+1", wantErr: `run 2 "1+1": past the largest offset`},
		{name: "binary garbage", committed: 10, give: "s1:10:\x00\xff+1", wantErr: "in decimal"},
		{name: "one good run then garbage", committed: 10, give: "s1:10:1+39,zz", wantErr: `run 2 "zz"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFinished(tt.committed, tt.give)
			if !slices.Equal(got, tt.want) {
				t.Errorf("parseFinished(%d, %q) = %v; want %v", tt.committed, tt.give, got, tt.want)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("parseFinished(%d, %q) error = %v; want none", tt.committed, tt.give, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("parseFinished(%d, %q) error = %v; want one with %q", tt.committed, tt.give, err, tt.wantErr)
			}
		})
	}
}

// mustParseFinished returns the runs of md, committed with offset committed;
// it fails t when md does not parse.
func mustParseFinished(t *testing.T, committed int64, md string) []offsetRange {
	t.Helper()
	runs, err := parseFinished(committed, md)
	if err != nil {
		t.Fatalf("parseFinished(%d, %q): %v", committed, truncateText(md, 60), err)
	}
	return runs
}

// finishedSets returns deterministic sets of finished runs above base: the
// shapes a partition's commits take (one hole, every k-th offset pending,
// long and short runs, far offsets).
func finishedSets(base int64) map[string][]offsetRange {
	sets := map[string][]offsetRange{
		"one run":     {{base + 1, base + 1}},
		"one hole":    {{base + 1, base + 99}},
		"far offsets": {{base + 1_000_000, base + 1_000_000}, {base + 5_000_000_000, base + 5_000_000_100}},
	}
	for _, k := range []int64{2, 3, 10} {
		var rs []offsetRange
		for o := base + 1; o < base+3000; o += k {
			rs = append(rs, offsetRange{o, o + k - 2})
		}
		sets[fmt.Sprintf("every %dth pending", k)] = rs
	}
	var mixed []offsetRange
	o := base
	for i, p := range permutation(200, 3) {
		o += int64(p%5 + 1)
		mixed = append(mixed, offsetRange{o, o + int64(i%17)})
		o += int64(i%17) + 1
	}
	sets["mixed"] = mixed
	return sets
}

// The round trip: what encodeFinished writes without a limit, parseFinished
// reads back exactly.
func TestEncodeParseFinishedRoundTrip(t *testing.T) {
	for _, base := range []int64{0, 7, 1 << 40} {
		for name, give := range finishedSets(base) {
			md := encodeFinished(base, give, 1<<30)
			if got := mustParseFinished(t, base, md); !slices.Equal(got, give) {
				t.Errorf("base %d, %s: parseFinished(encodeFinished()) = %d runs; want %d (metadata %q...)",
					base, name, len(got), len(give), truncateText(md, 60))
			}
		}
	}
}

// Over the limit, the metadata keeps the lowest runs that fit, whole: what
// it records is finished, and only finished offsets above the last run it
// keeps are left to come again. truncateMetadata, which shortens metadata
// the broker refused, cuts exactly where encodeFinished stops.
func TestEncodeFinishedOverTheLimitKeepsTheLowestRunsThatFit(t *testing.T) {
	for name, give := range finishedSets(100) {
		full := encodeFinished(100, give, 1<<30)
		for _, max := range []int{0, 10, 15, 64, 100, 1000, kafkaMetadataMax, len(full) - 1, len(full)} {
			got := encodeFinished(100, give, max)
			if len(got) > max {
				t.Errorf("%s: len(encodeFinished(max %d)) = %d; want at most %d", name, max, len(got), max)
			}
			runs := mustParseFinished(t, 100, got)
			if !slices.Equal(runs, give[:len(runs)]) {
				t.Errorf("%s, max %d: kept runs %v are not the lowest of %v", name, max, runs, give[:min(len(give), 3)])
			}
			if len(runs) < len(give) {
				next := encodeFinished(100, give[:len(runs)+1], 1<<30)
				if len(next) <= max {
					t.Errorf("%s, max %d: kept %d runs (%d bytes), but %d runs fit in %d bytes", name, max, len(runs), len(got), len(runs)+1, len(next))
				}
			}
			if cut := truncateMetadata(full, max); cut != got {
				t.Errorf("%s: truncateMetadata(max %d) = %q; want %q, as encodeFinished", name, max, truncateText(cut, 40), truncateText(got, 40))
			}
		}
	}
}

func TestEncodeFinishedFitsThousandsOfPendingOffsetsInTheDefaultLimit(t *testing.T) {
	var give []offsetRange // every 10th offset pending, from 1 000 000
	for o := int64(1_000_001); o < 1_100_000; o += 10 {
		give = append(give, offsetRange{o, o + 8})
	}
	md := encodeFinished(1_000_000, give, kafkaMetadataMax)
	runs := mustParseFinished(t, 1_000_000, md)
	covered := runs[len(runs)-1].to - 1_000_000
	t.Logf("%d bytes record %d runs: offsets up to %d above the committed one", len(md), len(runs), covered)
	if len(md) > kafkaMetadataMax || covered < 9000 || !strings.HasPrefix(md, "s1:1000000:1+9,1+9,") {
		t.Errorf("metadata of %d bytes covers %d offsets (%q...); want at most %d bytes covering at least 9000",
			len(md), covered, truncateText(md, 30), kafkaMetadataMax)
	}
}

package sources

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseBoundReadsEveryFormAndNamesTheInputItRefuses(t *testing.T) {
	tests := []struct {
		give string
		want Bound
	}{
		{"", Bound{}},
		{"2026-11-30T14:00:00Z", Bound{Kind: BoundTime, Time: time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC)}},
		{"2026-11-30T15:00:00.5+01:00", Bound{Kind: BoundTime, Time: time.Date(2026, 11, 30, 14, 0, 0, 5e8, time.UTC)}},
		{"offset:0", Bound{Kind: BoundOffset, Offset: 0, AllPartitions: true}},
		{"offset:42", Bound{Kind: BoundOffset, Offset: 42, AllPartitions: true}},
		{"offset:3=7", Bound{Kind: BoundOffset, Offsets: map[int]int64{3: 7}}},
		{"offset:0=5,12=0", Bound{Kind: BoundOffset, Offsets: map[int]int64{0: 5, 12: 0}}},
		{"seq:1", Bound{Kind: BoundSeq, Seq: 1}},
		{"seq:18446744073709551615", Bound{Kind: BoundSeq, Seq: 1<<64 - 1}},
	}
	for _, tt := range tests {
		got, err := ParseBound(tt.give)
		if err != nil {
			t.Errorf("ParseBound(%q) = %v; want %+v", tt.give, err, tt.want)
			continue
		}
		if !got.Time.Equal(tt.want.Time) {
			t.Errorf("ParseBound(%q).Time = %v; want %v", tt.give, got.Time, tt.want.Time)
		}
		got.Time, tt.want.Time = time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseBound(%q) = %+v; want %+v", tt.give, got, tt.want)
		}
	}

	bad := []struct {
		give, want string // want: in the error, besides the input
	}{
		{"offset:", "offset:N"},
		{"offset:-1", "offset:N"},
		{"offset:x", "offset:N"},
		{"offset:1.5", "offset:N"},
		{"offset:0=", "want P=N"},
		{"offset:=5", "want P=N"},
		{"offset:0=5,", "want P=N"},
		{"offset:0=-5", "want P=N"},
		{"offset:-1=5", "want P=N"},
		{"offset:0=5,0=6", "partition 0 given twice"},
		{"seq:", "seq:N"},
		{"seq:0", "seq:N"},
		{"seq:-3", "seq:N"},
		{"seq:x", "seq:N"},
		{"2026-11-30", "RFC 3339"},
		{"2026-11-30 14:00:00", "RFC 3339"},
		{"yesterday", "RFC 3339"},
		{"Offset:5", "RFC 3339"},
	}
	for _, tt := range bad {
		_, err := ParseBound(tt.give)
		if err == nil || !strings.Contains(err.Error(), `"`+tt.give+`"`) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseBound(%q) = %v; want an error quoting it and saying %q", tt.give, err, tt.want)
		}
	}
}

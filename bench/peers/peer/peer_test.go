package peer

import (
	"encoding/json"
	"testing"
)

func TestBodyIsSizeBytesOfJSONNamingItsMessage(t *testing.T) {
	tests := []struct {
		give int
		want string
	}{{0, "pay_0000000000"}, {42, "pay_0000000042"}, {9_999_999_999, "pay_9999999999"}}
	for _, tt := range tests {
		b := Body(tt.give)
		if len(b) != Size {
			t.Errorf("len(Body(%d)) = %d; want %d", tt.give, len(b), Size)
		}
		var v struct{ Payment string }
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("Body(%d) is not JSON: %v\n%s", tt.give, err, b)
		}
		if v.Payment != tt.want {
			t.Errorf("Body(%d).payment = %q; want %q", tt.give, v.Payment, tt.want)
		}
	}
}

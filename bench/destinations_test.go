package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestHostFleetCountsEachHostsRequestsAndAcceptedConnections(t *testing.T) {
	f, err := startHostFleet(3)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	urls := f.urls()
	for i, u := range urls {
		if want := "http://" + hostIP(i) + ":"; !strings.HasPrefix(u, want) {
			t.Errorf("urls()[%d] = %q; want it to start %q", i, u, want)
		}
	}
	// One client keeps its connection to host 0 for three requests; three
	// clients each open their own to host 1 and keep it; host 2 gets
	// nothing.
	keep := &http.Client{Transport: &http.Transport{}}
	defer keep.CloseIdleConnections()
	for range 3 {
		post(t, keep, urls[0])
	}
	for range 3 {
		c := &http.Client{Transport: &http.Transport{}}
		defer c.CloseIdleConnections()
		post(t, c, urls[1])
	}

	got := f.counts()
	want := fleetCounts{requests: 6, connections: 4, maxConnections: 3, maxOpen: 3, reached: 2}
	if got != want {
		t.Errorf("counts() = %+v; want %+v", got, want)
	}
	if n := f.hosts[0].maxOpen.Load(); n != 1 {
		t.Errorf("host 0: most open at once = %d; want 1", n)
	}
	if n := f.requests.Load(); n != 6 {
		t.Errorf("requests = %d; want 6", n)
	}
}

func TestHostIPNamesDistinctLoopbackAddressesOutside127_0_0(t *testing.T) {
	tests := []struct {
		give int
		want string
	}{
		{0, "127.0.1.1"},
		{249, "127.0.1.250"},
		{250, "127.0.2.1"},
		{999, "127.0.4.250"},
		{maxFleet - 1, "127.0.254.250"},
	}
	for _, tt := range tests {
		if got := hostIP(tt.give); got != tt.want {
			t.Errorf("hostIP(%d) = %q; want %q", tt.give, got, tt.want)
		}
	}
}

func TestDestinationsGoalIsMetOnlyWithAtMostMaxInFlightPerHostConnectionsToAHost(t *testing.T) {
	tests := []struct {
		name           string
		maxConnections int64
		want           bool
	}{
		{"reused", 2, true},
		{"one too many", 3, false},
		{"a connection per request", 40, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &DestinationsSection{Hosts: 1000, Limit: 2000, MaxInFlightPerHost: 2, Runs: []DestinationRun{
				{Name: destinationsFixed, Hosts: 1, Requests: 100, HostsReached: 1, Connections: 1, MaxConnections: 1},
				{Name: destinationsMany, Hosts: 1000, Requests: 40_000, HostsReached: 1000, Connections: 1000 * tt.maxConnections, MaxConnections: tt.maxConnections},
			}}
			goals := s.goals()
			if len(goals) != 1 {
				t.Fatalf("goals() = %+v; want 1 goal", goals)
			}
			if goals[0].Met != tt.want {
				t.Errorf("goals()[0] = %+v; want met %v", goals[0], tt.want)
			}
		})
	}
}

// post sends an empty JSON object to url with c and fails t unless the
// answer is 200.
func post(t *testing.T, c *http.Client, url string) {
	t.Helper()
	resp, err := c.Post(url, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s; want 200 OK", url, resp.Status)
	}
}

package faults

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func get(t *testing.T, client *http.Client, url string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// proxied starts handler behind a Proxy, both closed at the test's end, and
// returns the proxy, its URL, and a client whose connection through it is
// open and has carried one request; handler must answer "pong".
func proxied(t *testing.T, handler http.HandlerFunc) (*Proxy, string, *http.Client) {
	t.Helper()
	server := httptest.NewServer(handler)
	t.Cleanup(server.Close)
	p, err := NewProxy(server.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	url := "http://" + p.Addr()
	kept := &http.Client{} // keeps its connection open between requests
	if body, err := get(t, kept, url); err != nil || body != "pong" {
		t.Fatalf("through the proxy: %q, %v", body, err)
	}
	return p, url, kept
}

func pong(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("pong")) }

// A cut proxy black-holes traffic on open and new connections alike; once
// restored, both carry traffic again.
func TestProxyCutsAndRestores(t *testing.T) {
	p, url, kept := proxied(t, pong)

	p.Cut()
	for name, client := range map[string]*http.Client{"open connection": kept, "new connection": {Transport: &http.Transport{DisableKeepAlives: true}}} {
		if _, err := get(t, client, url); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s while cut: %v, want a timeout", name, err)
		}
	}

	p.Restore()
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if body, err := get(t, fresh, url); err != nil || body != "pong" {
		t.Errorf("after restore: %q, %v", body, err)
	}
}

// A stalled proxy drops the open connection, and a request on a new one
// waits in the client until Restore, then goes through.
func TestProxyStallHoldsRequestsInTheClient(t *testing.T) {
	requests := make(chan struct{}, 10)
	p, url, kept := proxied(t, func(w http.ResponseWriter, r *http.Request) {
		requests <- struct{}{}
		pong(w, r)
	})
	<-requests

	p.Stall()
	if _, err := get(t, kept, url); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("while stalled: %v, want a timeout", err)
	}
	if len(requests) != 0 {
		t.Fatalf("%d requests reached the server while stalled", len(requests))
	}
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		resp, err := kept.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case <-requests:
		t.Fatal("a request reached the server while stalled")
	case <-time.After(200 * time.Millisecond):
	}
	p.Restore()
	if err := <-done; err != nil {
		t.Errorf("the held request after restore: %v", err)
	}
}

// A request sent on an open connection while the proxy is cut reaches the
// server after Restore, and the proxy records when its bytes were sent and
// when they were delivered.
func TestProxyRecordsHeldBytes(t *testing.T) {
	p, url, kept := proxied(t, pong)
	if held := p.Held(); len(held) != 0 {
		t.Fatalf("held %v before any cut", held)
	}

	p.Cut()
	cut := time.Now()
	done := make(chan error, 1)
	go func() {
		resp, err := kept.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	restored := time.Now()
	p.Restore()
	if err := <-done; err != nil {
		t.Fatalf("the held request after restore: %v", err)
	}
	// The proxy records a chunk once written, which may be after the
	// answer came back.
	held := p.Held()
	for deadline := time.Now().Add(time.Second); len(held) == 0 && time.Now().Before(deadline); held = p.Held() {
		time.Sleep(10 * time.Millisecond)
	}
	if len(held) == 0 {
		t.Fatal("nothing recorded as held")
	}
	for _, h := range held {
		if h.Sent.Before(cut) || !h.Sent.Before(restored) || h.Delivered.Before(restored) {
			t.Errorf("held %+v: want sent between the cut (%s) and the restore (%s), delivered after it", h, cut, restored)
		}
	}
}

package expectations

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestExpectations(t *testing.T) {
	tests := []struct {
		name  string
		steps func(e *Expectations, clk *clocktesting.FakePassiveClock)
		want  bool
	}{
		{"an unknown key is satisfied", func(*Expectations, *clocktesting.FakePassiveClock) {}, true},
		{"an expected creation not yet seen is unsatisfied", func(e *Expectations, _ *clocktesting.FakePassiveClock) {
			e.ExpectCreations(0, "ns/a", 1)
		}, false},
		{"a seen creation satisfies", func(e *Expectations, _ *clocktesting.FakePassiveClock) {
			e.ExpectCreations(0, "ns/a", 1)
			e.CreationObserved(0, "ns/a")
		}, true},
		{"an expected deletion is met only by its uid", func(e *Expectations, _ *clocktesting.FakePassiveClock) {
			e.ExpectDeletions(0, "ns/a", "u1", "u2")
			e.DeletionObserved(0, "ns/a", "u1")
			e.DeletionObserved(0, "ns/a", "u3")
			e.DeletionObserved(0, "ns/a", "u1") // seen twice, counted once
		}, false},
		{"all expected deletions seen satisfy", func(e *Expectations, _ *clocktesting.FakePassiveClock) {
			e.ExpectDeletions(0, "ns/a", "u1", "u2", "u1")
			e.DeletionObserved(0, "ns/a", "u2")
			e.DeletionObserved(0, "ns/a", "u1")
		}, true},
		{"blocked expectations expire five minutes after the first check", func(e *Expectations, clk *clocktesting.FakePassiveClock) {
			e.ExpectCreations(0, "ns/a", 1)
			e.Satisfied(0, "ns/a") // blocked from now
			clk.SetTime(clk.Now().Add(Timeout + time.Second))
		}, true},
		{"blocked expectations hold before five minutes", func(e *Expectations, clk *clocktesting.FakePassiveClock) {
			e.ExpectCreations(0, "ns/a", 1)
			e.Satisfied(0, "ns/a")
			clk.SetTime(clk.Now().Add(Timeout - time.Second))
		}, false},
		{"a new raise restarts the timeout", func(e *Expectations, clk *clocktesting.FakePassiveClock) {
			e.ExpectCreations(0, "ns/a", 1)
			e.Satisfied(0, "ns/a")
			clk.SetTime(clk.Now().Add(Timeout - time.Second))
			e.ExpectCreations(0, "ns/a", 1)
			e.Satisfied(0, "ns/a")
			clk.SetTime(clk.Now().Add(2 * time.Second))
		}, false},
		{"a dropped range forgets its expectations", func(e *Expectations, _ *clocktesting.FakePassiveClock) {
			e.ExpectCreations(0, "ns/a", 1)
			e.DropRange(0)
		}, true},
		{"another range's drop leaves the key alone", func(e *Expectations, _ *clocktesting.FakePassiveClock) {
			e.ExpectCreations(0, "ns/a", 1)
			e.DropRange(1)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Now())
			e := New(2, clk)
			tt.steps(e, clk)
			if got := e.Satisfied(0, "ns/a"); got != tt.want {
				t.Errorf("Satisfied = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestConcurrentRaiseAndLowerBalance(t *testing.T) {
	e := New(4, clocktesting.NewFakePassiveClock(time.Now()))
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				key := fmt.Sprintf("ns/vmi-%d", i%16)
				e.Raise(w%4, key, 1, 1)
				e.Lower(w%4, key, 1, 1)
			}
		})
	}
	wg.Wait()
	for rng := range 4 {
		for i := range 16 {
			if !e.Satisfied(rng, fmt.Sprintf("ns/vmi-%d", i)) {
				t.Fatalf("range %d key %d unsatisfied after balanced raises and lowers", rng, i)
			}
		}
	}
	if n := e.Count(); n != 0 {
		t.Errorf("Count() = %d, want 0", n)
	}
}

func TestPending(t *testing.T) {
	e := New(1, clocktesting.NewFakePassiveClock(time.Now()))
	e.ExpectCreations(0, "k", 2)
	e.ExpectDeletions(0, "k", types.UID("x"))
	if adds, dels := e.Pending(0, "k"); adds != 2 || dels != 1 {
		t.Errorf("Pending = %d, %d; want 2, 1", adds, dels)
	}
	e.Delete(0, "k")
	if adds, dels := e.Pending(0, "k"); adds != 0 || dels != 0 {
		t.Errorf("Pending after Delete = %d, %d; want 0, 0", adds, dels)
	}
}

func TestRangeMapSeesNewAndDeletedKeysAtOnce(t *testing.T) {
	m := newRangeMap()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 500 {
				key := fmt.Sprintf("k-%d-%d", w, i)
				created := m.loadOrCreate(key)
				if got := m.load(key); got != created {
					t.Errorf("load(%s) right after creating it returned another record", key)
					return
				}
			}
		})
	}
	wg.Wait()
	n := 0
	m.each(func(*record) { n++ })
	if n != 2000 {
		t.Errorf("map holds %d records, want 2000", n)
	}
	m.delete("k-0-0")
	if m.load("k-0-0") != nil {
		t.Error("a deleted key is still visible")
	}
	if m.load("k-3-499") == nil {
		t.Error("deleting one key lost another")
	}
}

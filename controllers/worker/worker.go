// Package worker runs a controller's queue workers: the loop the VM,
// migration and node controllers share — take an item, sync it, requeue it
// with backoff on error or after a wait when time alone will change the
// answer, forget it otherwise — under the pprof label of the controller.
package worker

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/virtshard/virtshard/controllers/profiling"
)

// Sync reconciles one item; a positive duration asks to look again after it.
type Sync[T comparable] func(ctx context.Context, item T) (time.Duration, error)

// Run runs n workers of the controller name on q until ctx is done, then
// shuts q down and waits for them.
func Run[T comparable](ctx context.Context, name string, n int, q workqueue.TypedRateLimitingInterface[T], reconcile Sync[T]) {
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			profiling.Do(ctx, name, func(ctx context.Context) {
				for next(ctx, name, q, reconcile) {
				}
			})
		})
	}
	wg.Wait()
}

func next[T comparable](ctx context.Context, name string, q workqueue.TypedRateLimitingInterface[T], reconcile Sync[T]) bool {
	it, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(it)
	after, err := reconcile(ctx, it)
	switch {
	case err != nil:
		klog.FromContext(ctx).V(2).Info("Reconcile failed, requeueing", "controller", name, "item", it, "err", err)
		q.AddRateLimited(it)
	case after > 0:
		q.Forget(it)
		q.AddAfter(it, after)
	default:
		q.Forget(it)
	}
	return true
}

// Package demo is what `make run` runs: the local cluster, three
// virtshard-controller replicas as local processes, and a demo workload of
// VMIs, with live progress, until interrupted.
package demo

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/shard"
)

// Options of the demo.
type Options struct {
	Binary    string
	Replicas  int
	VMIs      int
	Rate      float64
	Nodes     int
	Namespace string
	// Duration stops the demo by itself after this long (0: until Ctrl-C).
	Duration time.Duration
}

// Parse reads flags.
func (o *Options) Parse(args []string) error {
	fs := flag.NewFlagSet("virtshard-run", flag.ContinueOnError)
	fs.StringVar(&o.Binary, "controller", "bin/virtshard-controller", "virtshard-controller binary")
	fs.IntVar(&o.Replicas, "replicas", 3, "controller replicas")
	fs.IntVar(&o.VMIs, "vmis", 1000, "demo VMIs to create")
	fs.Float64Var(&o.Rate, "rate", 0, "VMIs created per second; 0 is as fast as possible")
	fs.IntVar(&o.Nodes, "nodes", cluster.DefaultNodes, "kwok nodes")
	fs.StringVar(&o.Namespace, "namespace", "virtshard-demo", "namespace of the demo VMIs (recreated)")
	fs.DurationVar(&o.Duration, "duration", 0, "stop after this long; 0 runs until interrupted")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.Replicas < 1 || o.VMIs < 0 || o.Rate < 0 {
		return fmt.Errorf("--replicas must be positive, --vmis and --rate not negative")
	}
	return nil
}

const leaseNamespace = "virtshard-system"

// Run runs the demo until ctx is done (or Duration passed), then stops the
// replicas cleanly. The cluster keeps running (`make cluster-down`).
func (o *Options) Run(ctx context.Context, out io.Writer) error {
	copts, err := cluster.DefaultOptions()
	if err != nil {
		return err
	}
	copts.Nodes = o.Nodes
	fmt.Fprintf(out, "starting the local cluster (%d kwok nodes)...\n", o.Nodes)
	if _, err := cluster.Up(ctx, copts); err != nil {
		return err
	}
	cfg, err := copts.RESTConfig()
	if err != nil {
		return err
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	kv, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := freshNamespace(ctx, kube, o.Namespace, out); err != nil {
		return err
	}
	if err := ensureNamespace(ctx, kube, leaseNamespace); err != nil {
		return err
	}

	binary, err := filepath.Abs(o.Binary)
	if err != nil {
		return err
	}
	ropts := replicas.Options{Binary: binary, Kubeconfig: copts.KubeconfigPath(), Namespace: leaseNamespace,
		LogDir: filepath.Join(copts.Workdir(), "logs")}
	var running []*replicas.Replica
	defer func() {
		fmt.Fprintln(out, "stopping the replicas (ranges are handed off)...")
		var wg sync.WaitGroup
		for _, r := range running {
			wg.Go(func() { r.Stop(15 * time.Second) })
		}
		wg.Wait()
		fmt.Fprintln(out, "stopped; the cluster keeps running (make cluster-down stops it)")
	}()
	for i := range o.Replicas {
		r, err := replicas.Start(ropts, fmt.Sprintf("virtshard-%d", i))
		if err != nil {
			return err
		}
		running = append(running, r)
	}
	fmt.Fprintf(out, "%d replicas started, logs in %s\n", o.Replicas, ropts.LogDir)

	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	var created atomic.Int64
	go o.createVMIs(ctx, kv, &created, out)
	o.watch(ctx, kube, kv, running, &created, out)
	return nil
}

func (o *Options) createVMIs(ctx context.Context, kv *kubevirt.Clientset, created *atomic.Int64, out io.Writer) {
	opts := workload.Options{Namespace: o.Namespace, Count: o.VMIs, Concurrency: 8, Rate: o.Rate, Prefix: "demo"}
	if err := workload.Create(ctx, kv, opts, created); err != nil && ctx.Err() == nil {
		fmt.Fprintln(out, err)
	}
}

// watch prints progress every two seconds until ctx is done, and the shard
// map once all VMIs run.
func (o *Options) watch(ctx context.Context, kube kubernetes.Interface, kv *kubevirt.Clientset, running []*replicas.Replica, created *atomic.Int64, out io.Writer) {
	ticker := time.NewTicker(2 * time.Second)
	defer ticker.Stop()
	start := time.Now()
	lastRunning, lastAt := 0, start
	printedMap := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		list, err := kv.VirtualMachineInstances(o.Namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			continue
		}
		byPhase := map[string]int{}
		for _, v := range list.Items {
			phase := string(v.Status.Phase)
			if phase == "" {
				phase = "Pending"
			}
			byPhase[phase]++
		}
		now := time.Now()
		rate := float64(byPhase["Running"]-lastRunning) / now.Sub(lastAt).Seconds()
		lastRunning, lastAt = byPhase["Running"], now
		fmt.Fprintf(out, "%6s  created %d/%d  %s  %.0f Running/s  ranges %s\n",
			now.Sub(start).Round(time.Second), created.Load(), o.VMIs, phases(byPhase), rate, ranges(ctx, running))
		if !printedMap && byPhase["Running"] == o.VMIs {
			printedMap = true
			fmt.Fprintf(out, "\nall %d VMIs Running after %s. Shard map:\n", o.VMIs, now.Sub(start).Round(time.Millisecond))
			if m, err := shard.ReadMap(ctx, kube, leaseNamespace, "virtshard"); err == nil {
				_ = m.Write(out, now)
			}
			fmt.Fprintln(out, "\nreplicas keep running; press Ctrl-C to stop them")
		}
	}
}

func phases(byPhase map[string]int) string {
	var parts []string
	for _, p := range []string{"Pending", "Scheduling", "Scheduled", "Running", "Failed"} {
		if n := byPhase[p]; n > 0 || p == "Running" {
			parts = append(parts, fmt.Sprintf("%s %d", p, n))
		}
	}
	return strings.Join(parts, ", ")
}

func ranges(ctx context.Context, running []*replicas.Replica) string {
	var parts []string
	for _, r := range running {
		n := "?"
		if families, err := r.Metrics(ctx); err == nil {
			n = fmt.Sprint(replicas.Sum(families, "virtshard_shard_ranges_owned", nil))
		}
		parts = append(parts, r.ID+"="+n)
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func ensureNamespace(ctx context.Context, kube kubernetes.Interface, name string) error {
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// freshNamespace deletes name if it exists, waits for it to go, and creates it.
func freshNamespace(ctx context.Context, kube kubernetes.Interface, name string, out io.Writer) error {
	err := kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	if err == nil {
		fmt.Fprintf(out, "deleting the previous demo namespace %s...\n", name)
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s still terminating: %w", name, err)
	}
	return ensureNamespace(ctx, kube, name)
}

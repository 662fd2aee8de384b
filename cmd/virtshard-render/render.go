package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/virtshard/virtshard/controllers/apidefaults"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/instancetype"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/shard"
)

const usage = `Each INPUT is a YAML file, or a directory of *.yaml and *.yml files, holding
one VirtualMachineInstance and the objects its pod depends on, as documents of
one stream: PersistentVolumeClaims, DataVolumes, NetworkAttachmentDefinitions,
ConfigMaps, Namespaces, ResourceQuotas, a KubeVirt CR, and for a migration
target a VirtualMachineInstanceMigration with its source Pod. The VMI is taken
as virt-api stored it; --api-defaults first applies virt-api's create-time
defaults, for VMIs written by hand.`

// Options of virtshard-render.
type Options struct {
	// KubeVirtCR is a file with the cluster's KubeVirt CR; one in an input
	// takes precedence for that input.
	KubeVirtCR string
	// APIDefaults applies virt-api's create-time defaults first.
	APIDefaults bool
	// Out, when set, receives one pod file per input file, named after it.
	Out string
	// Architecture is the cluster's (virt-controller's host) architecture.
	Architecture string
	RangeCount   int
	ShardKey     string
	Template     template.Options
	Inputs       []string
}

func newOptions() *Options {
	tmpl := template.DefaultOptions()
	return &Options{Architecture: "amd64", RangeCount: shard.DefaultRangeCount, ShardKey: "uid", Template: tmpl}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.KubeVirtCR, "kubevirt-cr", o.KubeVirtCR, "file with the cluster's KubeVirt CR (default: none, KubeVirt's defaults)")
	fs.BoolVar(&o.APIDefaults, "api-defaults", o.APIDefaults, "apply virt-api's create-time defaults to each VMI first")
	fs.StringVar(&o.Out, "out", o.Out, "write each pod to DIR under its input's file name instead of to stdout")
	fs.StringVar(&o.Architecture, "arch", o.Architecture, "the cluster's default architecture")
	fs.StringVar(&o.Template.LauncherImage, "launcher-image", o.Template.LauncherImage, "the virt-launcher image")
	fs.IntVar(&o.RangeCount, "ranges", o.RangeCount, "number of hash ranges, as the replicas' --ranges")
	fs.StringVar(&o.ShardKey, "shard-key", o.ShardKey, "uid or namespace, as the replicas' --shard-key")
}

// Validate checks the options.
func (o *Options) Validate() error {
	if len(o.Inputs) == 0 {
		return errors.New("no INPUT given")
	}
	return nil
}

// Run renders every input, to o.Out or to stdout.
func (o *Options) Run(stdout io.Writer) error {
	key, err := shard.ParseKey(o.ShardKey)
	if err != nil {
		return err
	}
	ranges, err := shard.NewRanges(o.RangeCount, key)
	if err != nil {
		return err
	}
	var defaultCR *virtv1.KubeVirt
	if o.KubeVirtCR != "" {
		data, err := os.ReadFile(o.KubeVirtCR)
		if err != nil {
			return err
		}
		defaultCR = &virtv1.KubeVirt{}
		if err := yaml.UnmarshalStrict(data, defaultCR); err != nil {
			return fmt.Errorf("%s: %w", o.KubeVirtCR, err)
		}
	}
	files, err := inputFiles(o.Inputs)
	if err != nil {
		return err
	}
	if o.Out != "" {
		if err := os.MkdirAll(o.Out, 0o755); err != nil {
			return err
		}
	}
	for i, file := range files {
		pod, err := o.render(file, defaultCR, ranges)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		data, err := yaml.Marshal(pod)
		if err != nil {
			return err
		}
		if o.Out != "" {
			if err := os.WriteFile(filepath.Join(o.Out, filepath.Base(file)), data, 0o644); err != nil {
				return err
			}
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout, "---")
		}
		if _, err := stdout.Write(data); err != nil {
			return err
		}
	}
	return nil
}

func (o *Options) render(file string, defaultCR *virtv1.KubeVirt, ranges shard.Ranges) (*corev1.Pod, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	bundle, err := template.DecodeBundle(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	kv := bundle.KubeVirt
	if kv == nil {
		kv = defaultCR
	}
	if kv == nil {
		kv = &virtv1.KubeVirt{}
	}
	if kv.Status.DefaultArchitecture == "" {
		// What virt-operator would write, for a CR written by hand.
		kv = kv.DeepCopy()
		kv.Status.DefaultArchitecture = o.Architecture
		if a := kv.Spec.Configuration.ArchitectureConfiguration; a != nil && a.DefaultArchitecture != "" {
			kv.Status.DefaultArchitecture = a.DefaultArchitecture
		}
	}
	cluster, err := clusterconfig.FromKubeVirt(kv, o.Architecture)
	if err != nil {
		return nil, fmt.Errorf("KubeVirt CR: %w", err)
	}
	vmi := bundle.VMI
	if bundle.Instancetype != nil || bundle.Preference != nil {
		instancetype.ApplyAutoattach(bundle.Preference, &vmi.Spec)
		if conflicts := instancetype.Apply("spec", bundle.Instancetype, bundle.Preference, &vmi.Spec, &vmi.ObjectMeta); len(conflicts) > 0 {
			return nil, conflicts.VMIError()
		}
	}
	if o.APIDefaults {
		if err := apidefaults.Apply(vmi, cluster, metav1.NewTime(time.Now())); err != nil {
			return nil, fmt.Errorf("virt-api defaults: %w", err)
		}
	}
	rng := ranges.Owner(vmi)
	var pod *corev1.Pod
	if bundle.Migration != nil {
		if bundle.SourcePod == nil {
			return nil, errors.New("a migration target needs the migration's source Pod in the input")
		}
		pod, err = template.RenderMigrationTarget(vmi, bundle.Migration, bundle.SourcePod, rng, o.Template, cluster, bundle.Objects)
	} else {
		pod, err = template.Render(vmi, rng, o.Template, cluster, bundle.Objects)
	}
	if err != nil {
		return nil, err
	}
	pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	return pod, nil
}

// inputFiles expands directories into their YAML files, sorted.
func inputFiles(inputs []string) ([]string, error) {
	var files []string
	for _, in := range inputs {
		info, err := os.Stat(in)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			files = append(files, in)
			continue
		}
		entries, err := os.ReadDir(in)
		if err != nil {
			return nil, err
		}
		var found []string
		for _, e := range entries {
			if !e.IsDir() && (strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
				found = append(found, filepath.Join(in, e.Name()))
			}
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s holds no YAML files", in)
		}
		sort.Strings(found)
		files = append(files, found...)
	}
	return files, nil
}

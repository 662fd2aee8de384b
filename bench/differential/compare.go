package differential

import (
	"fmt"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Fields are an object's content flattened to leaf paths: maps by key,
// lists of named items (conditions by type, containers by name) by that
// name, other lists by index.
type Fields map[string]any

// Flatten flattens an object's normalized content.
func Flatten(content map[string]any) Fields {
	out := Fields{}
	flatten(out, "", content)
	return out
}

func flatten(out Fields, prefix string, v any) {
	switch v := v.(type) {
	case map[string]any:
		if len(v) == 0 {
			out[prefix] = map[string]any{}
		}
		for k, e := range v {
			flatten(out, key(prefix, k), e)
		}
	case []any:
		if len(v) == 0 {
			out[prefix] = []any{}
		}
		key := itemKey(v)
		for i, e := range v {
			idx := strconv.Itoa(i)
			if key != "" {
				idx = fmt.Sprint(e.(map[string]any)[key])
			}
			flatten(out, prefix+"["+idx+"]", e)
		}
	default:
		out[prefix] = v
	}
}

// key extends prefix by k: dotted, or in brackets when k has dots or
// slashes of its own (a label key).
func key(prefix, k string) string {
	switch {
	case strings.ContainsAny(k, "./[]"):
		return prefix + "[" + k + "]"
	case prefix == "":
		return k
	}
	return prefix + "." + k
}

// itemKey is the field that names each item of list, when every item has
// one and no two share it: conditions are compared by type, not by the
// order a controller happened to append them in.
func itemKey(list []any) string {
	for _, key := range []string{"type", "name"} {
		seen := map[string]bool{}
		ok := true
		for _, e := range list {
			m, isMap := e.(map[string]any)
			s, isString := m[key].(string)
			if !isMap || !isString || seen[s] {
				ok = false
				break
			}
			seen[s] = true
		}
		if ok {
			return key
		}
	}
	return ""
}

// Outcome is how one field of one object compares.
type Outcome string

const (
	Equal   Outcome = "equal"
	Differ  Outcome = "differ"
	Missing Outcome = "missing" // KubeVirt's virt-controller wrote it, virtshard did not
	Extra   Outcome = "extra"   // virtshard wrote it, KubeVirt's did not
)

// FieldDiff is one field that is not equal.
type FieldDiff struct {
	Kind, Name, Path string
	Outcome          Outcome
	KubeVirt, Ours   any
	// Known is the listed difference that explains it, or nil.
	Known *Difference
}

// Comparison is one checkpoint's objects compared.
type Comparison struct {
	// Counts by kind and outcome, a field each.
	Counts map[string]map[Outcome]int
	// Diffs are the fields that are not equal, known ones included.
	Diffs []FieldDiff
}

// Unknown are the differences no entry of the list explains.
func (c Comparison) Unknown() []FieldDiff {
	var out []FieldDiff
	for _, d := range c.Diffs {
		if d.Known == nil {
			out = append(out, d)
		}
	}
	return out
}

// Compare compares the objects KubeVirt's run and virtshard's left at one
// checkpoint. An object only one run has counts each of its fields as
// missing or extra.
func Compare(kubevirt, ours []Object, known []Difference) Comparison {
	c := Comparison{Counts: map[string]map[Outcome]int{}}
	index := func(objs []Object) map[[2]string]Fields {
		m := map[[2]string]Fields{}
		for _, o := range objs {
			m[[2]string{o.Kind, o.Name}] = Flatten(o.Content)
		}
		return m
	}
	theirs, mine := index(kubevirt), index(ours)
	keys := map[[2]string]bool{}
	for k := range theirs {
		keys[k] = true
	}
	for k := range mine {
		keys[k] = true
	}
	for _, k := range sortedKeys(keys) {
		a, b := theirs[k], mine[k]
		paths := map[string]bool{}
		for p := range a {
			paths[p] = true
		}
		for p := range b {
			paths[p] = true
		}
		for _, p := range sortedKeys(paths) {
			va, inA := a[p]
			vb, inB := b[p]
			var o Outcome
			switch {
			case inA && inB && reflect.DeepEqual(va, vb):
				o = Equal
			case inA && inB:
				o = Differ
			case inA:
				o = Missing
			default:
				o = Extra
			}
			if c.Counts[k[0]] == nil {
				c.Counts[k[0]] = map[Outcome]int{}
			}
			c.Counts[k[0]][o]++
			if o != Equal {
				d := FieldDiff{Kind: k[0], Name: k[1], Path: p, Outcome: o, KubeVirt: va, Ours: vb}
				d.Known = explain(known, d)
				c.Diffs = append(c.Diffs, d)
			}
		}
	}
	return c
}

// explain finds the listed difference that covers d.
func explain(known []Difference, d FieldDiff) *Difference {
	for i := range known {
		if known[i].covers(d) {
			return &known[i]
		}
	}
	return nil
}

func sortedKeys[K interface{ ~string | ~[2]string }](m map[K]bool) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b K) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	return out
}

// Difference is one way virtshard differs from KubeVirt on purpose.
type Difference struct {
	// Kind is the object kind it concerns; * for every kind.
	Kind string
	// Object, when set, is a pattern (path.Match) the object's normalized
	// name must match, such as "<event:VirtualMachine/*/FailedCreate#*>".
	Object string
	// Path is a field path pattern: * stands for one key, and a final
	// ** for everything below ("metadata.labels[virtshard.io/range]",
	// "status.conditions[*].lastProbeTime", "spec.**").
	Path string
	// Outcomes it explains; all when empty.
	Outcomes []Outcome
	// Reason says why, and KubeVirt where KubeVirt's behaviour comes from
	// (file:function).
	Reason, KubeVirt string
	// Issue, when set, makes it no deliberate difference but one virtshard
	// has not closed yet: the open issue that builds it. The report counts
	// these apart.
	Issue int
}

func (d Difference) covers(f FieldDiff) bool {
	if (d.Kind != "*" && d.Kind != f.Kind) || (len(d.Outcomes) > 0 && !slices.Contains(d.Outcomes, f.Outcome)) {
		return false
	}
	if d.Object != "" {
		if ok, _ := path.Match(d.Object, f.Name); !ok {
			return false
		}
	}
	pattern, p := segments(d.Path), segments(f.Path)
	for i, seg := range pattern {
		if seg == "**" && i == len(pattern)-1 {
			return true
		}
		if i >= len(p) || (seg != "*" && seg != p[i]) {
			return false
		}
	}
	return len(pattern) == len(p)
}

// segments splits a field path into its keys: "a.b[c.d].e" is a, b, c.d, e.
func segments(p string) []string {
	var out []string
	for p != "" {
		switch {
		case p[0] == '.':
			p = p[1:]
		case p[0] == '[':
			end := strings.IndexByte(p, ']')
			if end < 0 {
				return append(out, p[1:])
			}
			out, p = append(out, p[1:end]), p[end+1:]
		default:
			end := strings.IndexAny(p, ".[")
			if end < 0 {
				end = len(p)
			}
			out, p = append(out, p[:end]), p[end:]
		}
	}
	return out
}

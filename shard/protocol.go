package shard

import (
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// The shard protocol is what members must agree on to share ranges: how
// tenures fence ranges, how a range is handed over, what the assignment
// says. A release speaks the versions from OldestProtocol to Protocol, and
// says so on its member Lease, so that replicas of two releases run
// together through a StatefulSet rolling update. A release that changes the
// protocol raises Protocol and keeps OldestProtocol where the release
// before it was, for at least one release.
const (
	// Protocol is the newest version this release speaks. 2 is the tenure
	// protocol (tenures on member Leases, make-before-break handoffs).
	Protocol = 2
	// OldestProtocol is the oldest version this release still runs beside.
	OldestProtocol = 2
)

// Annotations on a member Lease naming the protocol versions its member
// speaks.
const (
	AnnotationProtocol       = "virtshard.io/protocol"
	AnnotationOldestProtocol = "virtshard.io/oldest-protocol"
)

// protocols is the span of protocol versions one member speaks.
type protocols struct{ oldest, newest int }

// ours is this release's span.
var ours = protocols{oldest: OldestProtocol, newest: Protocol}

// protocolsOf reads the span a member Lease declares. Releases before the
// annotations wrote none: one whose Lease names a tenure spoke the tenure
// protocol (2), one without a tenure the protocol before it (1). An
// annotation that does not parse declares nothing anyone speaks.
func protocolsOf(l *coordinationv1.Lease) protocols {
	newest, declared := l.Annotations[AnnotationProtocol]
	if !declared {
		if tenureOf(l) != "" {
			return protocols{oldest: 2, newest: 2}
		}
		return protocols{oldest: 1, newest: 1}
	}
	n, err := strconv.Atoi(newest)
	if err != nil || n < 1 {
		return protocols{}
	}
	o, err := strconv.Atoi(l.Annotations[AnnotationOldestProtocol])
	if err != nil || o < 1 || o > n {
		o = n
	}
	return protocols{oldest: o, newest: n}
}

// compatible reports whether two members share a protocol version: then
// they speak the newer's oldest or the older's newest, whichever is lower.
func (p protocols) compatible(q protocols) bool {
	return p.oldest > 0 && q.oldest > 0 && p.oldest <= q.newest && q.oldest <= p.newest
}

func (p protocols) String() string {
	if p.oldest == p.newest {
		return strconv.Itoa(p.newest)
	}
	return strconv.Itoa(p.oldest) + "-" + strconv.Itoa(p.newest)
}

// annotateProtocol declares this release's span on its member Lease l.
func annotateProtocol(l *coordinationv1.Lease) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AnnotationProtocol] = strconv.Itoa(Protocol)
	l.Annotations[AnnotationOldestProtocol] = strconv.Itoa(OldestProtocol)
}

// Package template renders a VMI's virt-launcher pod, as KubeVirt's template
// service does, simplified where noted. It also applies the defaults that
// virt-api's mutating webhook would have set (architecture, default pod
// network), since virtshard runs without that webhook, and validates the
// VMI's network spec.
//
// It is pure: no clients, no caches, no clock.
package template

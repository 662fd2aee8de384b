// Package template renders a VMI's virt-launcher pod exactly as KubeVirt
// v1.8.1's TemplateService does (RenderLaunchManifest, and
// RenderMigrationManifest for a migration's target), but for the
// deliberate differences listed in docs/controller.md; test/conformance
// holds it against KubeVirt's own code. It also fills, for VMIs no virt-api
// defaulted, the architecture and the default pod network, and validates
// what virt-api would refuse (networks, volumes, memory).
//
// It is pure: no clients, no clock. What it reads of the cluster comes in
// through Cluster (the KubeVirt CR's configuration) and Objects (cached
// PVCs, namespaces, quotas, NetworkAttachmentDefinitions, ConfigMaps).
package template

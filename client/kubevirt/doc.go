// Package kubevirt is virtshard's thin typed client for the kubevirt.io/v1
// resources it manages (VirtualMachineInstance, VirtualMachine,
// VirtualMachineInstanceMigration).
//
// It is built on client-go's generic gentype clients and the types of
// kubevirt.io/api, instead of kubevirt.io/client-go, which pulls in much of
// OpenShift. It owns the scheme and the REST wiring and nothing else: no
// caching, no business logic.
package kubevirt

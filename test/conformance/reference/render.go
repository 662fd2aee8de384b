package main

import (
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/mock/gomock"
	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"
	fakenetworkclient "kubevirt.io/client-go/networkattachmentdefinitionclient/fake"

	containerdisk "kubevirt.io/kubevirt/pkg/container-disk"
	"kubevirt.io/kubevirt/pkg/hooks"
	"kubevirt.io/kubevirt/pkg/network/netbinding"
	netannotations "kubevirt.io/kubevirt/pkg/network/pod/annotations"
	netresources "kubevirt.io/kubevirt/pkg/network/resources"
	storageannotations "kubevirt.io/kubevirt/pkg/storage/pod/annotations"
	"kubevirt.io/kubevirt/pkg/util"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	"kubevirt.io/kubevirt/pkg/virt-controller/services"
	operatorutil "kubevirt.io/kubevirt/pkg/virt-operator/util"
)

// virt-controller's settings: the defaults of its flags in
// pkg/virt-controller/watch/application.go, except the launcher image, which
// is what virt-operator v1.8.1 passes with --launcher-image. virt-operator
// also passes --exporter-image, which the launcher pod does not use; it is
// left at the flag's default.
const (
	launcherImage       = "quay.io/kubevirt/virt-launcher:v1.8.1"
	exporterImage       = "virt-exportserver"
	launcherQemuTimeout = 240
	launcherSubGid      = 107
	imagePullSecret     = ""
	virtShareDir        = util.VirtShareDir
	ephemeralDiskDir    = virtShareDir + "-ephemeral-disks"
)

var (
	containerDiskDir = filepath.Join(util.VirtShareDir, "container-disks")
	hotplugDiskDir   = filepath.Join(util.VirtShareDir, "hotplug-disks")
)

// sidecarShimImage is what virt-operator v1.8.1 sets as SIDECAR_SHIM_IMAGE
// in virt-controller's environment. The TemplateService reads it with
// os.Getenv for a hook sidecar that names no image (one that runs a script
// from a ConfigMap); it is the only environment variable the render reads.
const sidecarShimImage = "quay.io/kubevirt/sidecar-shim:v1.8.1"

// setupProcess sets what virt-controller has in place once at start-up and
// KubeVirt's code reads from process state: the environment variable above,
// fixed here rather than inherited, and containerdisk's mount base directory
// (initCommon in application.go).
func setupProcess() error {
	if err := os.Setenv(operatorutil.SidecarShimImageEnvName, sidecarShimImage); err != nil {
		return err
	}
	containerdisk.SetLocalDirectoryOnly(filepath.Join(ephemeralDiskDir, "container-disk-data"))
	return nil
}

// newTemplateService builds the TemplateService as virt-controller's
// initCommon does, over stores and fake clients that hold the corpus
// case's cluster objects.
func newTemplateService(ctrl *gomock.Controller, c *corpusCase, clusterConfig *virtconfig.ClusterConfig) (*services.TemplateService, error) {
	pvcStore := cache.NewStore(cache.DeletionHandlingMetaNamespaceKeyFunc)
	for _, pvc := range c.PVCs {
		if err := pvcStore.Add(pvc); err != nil {
			return nil, err
		}
	}
	namespaceStore := cache.NewStore(cache.DeletionHandlingMetaNamespaceKeyFunc)
	for _, ns := range c.Namespaces {
		if err := namespaceStore.Add(ns); err != nil {
			return nil, err
		}
	}
	if _, exists, _ := namespaceStore.GetByKey(c.VMI.Namespace); !exists {
		if err := namespaceStore.Add(&k8sv1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.VMI.Namespace}}); err != nil {
			return nil, err
		}
	}
	quotaStore := cache.NewStore(cache.DeletionHandlingMetaNamespaceKeyFunc)
	for _, quota := range c.ResourceQuotas {
		if err := quotaStore.Add(quota); err != nil {
			return nil, err
		}
	}
	virtClient, err := newVirtClient(ctrl, c)
	if err != nil {
		return nil, err
	}

	netAnnotationsGenerator := netannotations.NewGenerator(clusterConfig)
	return services.NewTemplateService(launcherImage,
		launcherQemuTimeout,
		virtShareDir,
		ephemeralDiskDir,
		containerDiskDir,
		hotplugDiskDir,
		imagePullSecret,
		pvcStore,
		virtClient,
		clusterConfig,
		launcherSubGid,
		exporterImage,
		quotaStore,
		namespaceStore,
		services.WithSidecarCreator(
			func(vmi *v1.VirtualMachineInstance, _ *v1.KubeVirtConfiguration) (hooks.HookSidecarList, error) {
				return hooks.UnmarshalHookSidecarList(vmi)
			}),
		services.WithSidecarCreator(netbinding.NetBindingPluginSidecarList),
		services.WithNetMemoryCalculator(netresources.MemoryCalculator{}),
		// application.go passes a zero storage Generator here, not the one
		// built over the cluster config (that one goes to the VMI controller).
		services.WithAnnotationsGenerators(netAnnotationsGenerator, storageannotations.Generator{}),
		services.WithNetTargetAnnotationsGenerator(netAnnotationsGenerator),
	), nil
}

// newVirtClient returns a mock KubevirtClient whose CoreV1 and NetworkClient
// are fake clientsets holding the case's ConfigMaps and
// NetworkAttachmentDefinitions: the only API reads a render makes.
func newVirtClient(ctrl *gomock.Controller, c *corpusCase) (kubecli.KubevirtClient, error) {
	k8sClient := k8sfake.NewClientset()
	for _, cm := range c.ConfigMaps {
		if err := k8sClient.Tracker().Add(cm); err != nil {
			return nil, fmt.Errorf("add ConfigMap %s: %w", cm.Name, err)
		}
	}
	// As in KubeVirt's template_test.go: the fake's kind-to-resource guess
	// gets network-attachment-definitions wrong, so NADs are created under
	// their resource explicitly.
	networkClient := fakenetworkclient.NewSimpleClientset()
	nadResource := schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}
	for _, nad := range c.NADs {
		if err := networkClient.Tracker().Create(nadResource, nad, nad.Namespace); err != nil {
			return nil, fmt.Errorf("add NetworkAttachmentDefinition %s: %w", nad.Name, err)
		}
	}
	virtClient := kubecli.NewMockKubevirtClient(ctrl)
	virtClient.EXPECT().CoreV1().Return(k8sClient.CoreV1()).AnyTimes()
	virtClient.EXPECT().NetworkClient().Return(networkClient).AnyTimes()
	return virtClient, nil
}

package faults

import (
	"fmt"
	"net/url"

	"k8s.io/client-go/tools/clientcmd"
)

// RedirectKubeconfig writes to dst a copy of the kubeconfig src whose
// clusters point at address (host:port) instead: a replica given dst talks
// to the API server through a Proxy. TLS still verifies: the proxy is on the
// same loopback IP as the API server it stands for.
func RedirectKubeconfig(src, dst, address string) error {
	cfg, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return err
	}
	for name, cluster := range cfg.Clusters {
		u, err := url.Parse(cluster.Server)
		if err != nil {
			return fmt.Errorf("cluster %s: %w", name, err)
		}
		u.Host = address
		cluster.Server = u.String()
	}
	return clientcmd.WriteToFile(*cfg, dst)
}

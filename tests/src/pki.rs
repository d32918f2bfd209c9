//! Certificates for one control-plane instance: a fresh CA per run, the API server's serving
//! certificate, client certificates for users, and the service-account signing key.
//!
//! The serving certificate carries `127.0.0.1` as an IP SAN because rustls (kube's TLS stack)
//! checks IP addresses strictly and the API server's self-signed fallback does not have it.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::Error;

/// The certificate authority of one run, and the files the components read.
pub struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
    /// Directory the PEM files are written to.
    pub dir: PathBuf,
}

/// A client identity: a certificate whose CN is the user name and whose O entries are its groups.
#[derive(Debug, Clone)]
pub struct ClientCert {
    /// PEM of the certificate.
    pub cert_pem: String,
    /// PEM (PKCS#8) of the private key.
    pub key_pem: String,
}

fn rcgen_err(what: &'static str) -> impl FnOnce(rcgen::Error) -> Error {
    move |source| Error::Certificate { what, source }
}

impl Pki {
    /// Generates the CA, the serving certificate and the service-account key into `dir`:
    /// `ca.crt`, `apiserver.crt`, `apiserver.key`, `sa.key` and its public half `sa.pub`.
    pub fn generate(dir: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            what: format!("creating {}", dir.display()),
            source,
        })?;
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(rcgen_err("CA parameters"))?;
        params
            .distinguished_name
            .push(DnType::CommonName, "reconhost-test-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().map_err(rcgen_err("CA key"))?;
        let ca = CertifiedIssuer::self_signed(params, key).map_err(rcgen_err("CA certificate"))?;
        let pki = Self {
            ca,
            dir: dir.to_owned(),
        };
        pki.write("ca.crt", &pki.ca.pem())?;

        let mut serving =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .map_err(rcgen_err("serving parameters"))?;
        serving
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().map_err(rcgen_err("serving key"))?;
        let cert = serving
            .signed_by(&key, &pki.ca)
            .map_err(rcgen_err("serving certificate"))?;
        pki.write("apiserver.crt", &cert.pem())?;
        pki.write("apiserver.key", &key.serialize_pem())?;

        let sa = KeyPair::generate().map_err(rcgen_err("service-account key"))?;
        pki.write("sa.key", &sa.serialize_pem())?;
        pki.write("sa.pub", &sa.public_key_pem())?;
        Ok(pki)
    }

    /// Issues a client certificate for `user` in `groups`, signed by this run's CA.
    pub fn issue_client(&self, user: &str, groups: &[&str]) -> Result<ClientCert, Error> {
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(rcgen_err("client parameters"))?;
        params.distinguished_name.push(DnType::CommonName, user);
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().map_err(rcgen_err("client key"))?;
        let cert = params
            .signed_by(&key, &self.ca)
            .map_err(rcgen_err("client certificate"))?;
        Ok(ClientCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// PEM of the CA certificate, which both signs clients and verifies the server.
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// Path of a file in the PKI directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn write(&self, name: &str, pem: &str) -> Result<(), Error> {
        let path = self.path(name);
        std::fs::write(&path, pem).map_err(|source| Error::Io {
            what: format!("writing {}", path.display()),
            source,
        })
    }
}

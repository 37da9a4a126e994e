//! The deployment's private CA (`braid cert init` / `braid cert issue`) and the TLS
//! material of a gateway: loading, checking, and reading a peer's site id.
//!
//! A certificate names its holder (site id, or `exit`) both as subject common name and
//! as DNS subject alternative name; the exit takes a site's id from the latter.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::core::field_error::FieldError;
use crate::core::wire::check_name;

const CA_YEARS: i64 = 20;
const LEAF_YEARS: i64 = 10;

/// Writes a new CA into `dir` (`ca.pem`, and `ca.key` readable by the owner only).
pub fn init_ca(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let key = KeyPair::generate().context("generating the CA key")?;
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "braid deployment CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    set_validity(&mut params, CA_YEARS);
    let cert = params
        .self_signed(&key)
        .context("signing the CA certificate")?;
    write_new(&dir.join("ca.key"), key.serialize_pem().as_bytes(), 0o600)?;
    write_new(&dir.join("ca.pem"), cert.pem().as_bytes(), 0o644)?;
    Ok(())
}

/// Issues a certificate for `name` (a site id, or the exit's name) signed by the CA in
/// `ca_dir`, written as `ca_dir/NAME.pem` and `ca_dir/NAME.key`.
pub fn issue(ca_dir: &Path, name: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
    issue_valid(ca_dir, name, -1, 365 * LEAF_YEARS)
}

/// [`issue`] with a certificate valid from `from_day` to `to_day`, days from now (a
/// negative day is in the past): tests give gateways expired certificates and ones
/// not valid yet.
pub fn issue_valid(
    ca_dir: &Path,
    name: &str,
    from_day: i64,
    to_day: i64,
) -> anyhow::Result<(PathBuf, PathBuf)> {
    check_name("name", name)?;
    let ca_pem = read(&ca_dir.join("ca.pem"))?;
    let ca_key = KeyPair::from_pem(&read(&ca_dir.join("ca.key"))?)
        .with_context(|| format!("{}: not a private key", ca_dir.join("ca.key").display()))?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key)
        .with_context(|| format!("{}: not a certificate", ca_dir.join("ca.pem").display()))?;
    let key = KeyPair::generate().context("generating the key")?;
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.subject_alt_names = vec![SanType::DnsName(name.try_into().context("name")?)];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let now = crate::clock::wall_now();
    params.not_before = now + time::Duration::days(from_day);
    params.not_after = now + time::Duration::days(to_day);
    let cert = params
        .signed_by(&key, &issuer)
        .context("signing the certificate")?;
    let (cert_path, key_path) = (
        ca_dir.join(format!("{name}.pem")),
        ca_dir.join(format!("{name}.key")),
    );
    write_new(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_new(&cert_path, cert.pem().as_bytes(), 0o644)?;
    Ok((cert_path, key_path))
}

/// A gateway's loaded TLS material.
pub struct TlsMaterial {
    pub roots: Arc<rustls::RootCertStore>,
    /// The CA certificates `roots` holds, as read.
    ca: Vec<CertificateDer<'static>>,
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl TlsMaterial {
    pub fn load(tls: &TlsConfig) -> anyhow::Result<TlsMaterial> {
        let ca = load_certs(&tls.ca)?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in &ca {
            roots
                .add(cert.clone())
                .with_context(|| format!("{}: not a usable CA certificate", tls.ca.display()))?;
        }
        Ok(TlsMaterial {
            roots: Arc::new(roots),
            ca,
            chain: load_certs(&tls.cert)?,
            key: PrivateKeyDer::from_pem_file(&tls.key)
                .with_context(|| format!("{}: no private key in PEM form", tls.key.display()))?,
        })
    }

    /// Whether `other` holds the same CA, certificate chain and key (a reload that
    /// finds the same material has nothing to rotate).
    pub fn same_as(&self, other: &TlsMaterial) -> bool {
        self.ca == other.ca
            && self.chain == other.chain
            && self.key.secret_der() == other.key.secret_der()
    }
}

/// Where the deployment's TLS files are (`[tls]` of the configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Configuration-time check that the TLS files hold what they should; returns the name
/// the certificate carries.
pub fn check_tls_files(tls: &TlsConfig) -> Result<String, FieldError> {
    let problem = |path: &str, e: anyhow::Error| FieldError {
        path: path.to_string(),
        problem: format!("{e:#}"),
    };
    load_certs(&tls.ca).map_err(|e| problem("tls.ca", e))?;
    let chain = load_certs(&tls.cert).map_err(|e| problem("tls.cert", e))?;
    PrivateKeyDer::from_pem_file(&tls.key).map_err(|e| FieldError {
        path: "tls.key".into(),
        problem: format!("{}: no private key in PEM form ({e})", tls.key.display()),
    })?;
    certificate_name(&chain[0]).map_err(|e| problem("tls.cert", e))
}

/// The holder's name in a certificate: its first DNS subject alternative name.
pub fn certificate_name(cert: &CertificateDer<'_>) -> anyhow::Result<String> {
    let (_, x509) =
        x509_parser::parse_x509_certificate(cert).context("not an X.509 certificate")?;
    let san = x509
        .subject_alternative_name()
        .context("unreadable subject alternative name")?;
    san.into_iter()
        .flat_map(|ext| ext.value.general_names.iter())
        .find_map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(name) => Some(name.to_string()),
            _ => None,
        })
        .context("the certificate carries no DNS name (issue it with `braid cert issue`)")
}

fn load_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}: malformed PEM", path.display()))?;
    if certs.is_empty() {
        bail!("{}: no certificate in PEM form", path.display());
    }
    Ok(certs)
}

fn set_validity(params: &mut CertificateParams, years: i64) {
    let now = crate::clock::wall_now();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(365 * years);
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Creates `path` with `mode`, refusing to overwrite: keys are never replaced silently.
fn write_new(path: &Path, contents: &[u8], mode: u32) -> anyhow::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(contents)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_certificates_carry_the_name_and_refuse_overwrite() {
        let dir = std::env::temp_dir().join(format!("braid-cert-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        init_ca(&dir).expect("init");
        assert!(
            init_ca(&dir).is_err(),
            "a second init must not replace the CA key"
        );
        let (cert, key) = issue(&dir, "branch-01").expect("issue");
        let tls = TlsConfig {
            ca: dir.join("ca.pem"),
            cert,
            key,
        };
        assert_eq!(check_tls_files(&tls).expect("valid material"), "branch-01");
        let m = TlsMaterial::load(&tls).expect("load");
        assert_eq!(certificate_name(&m.chain[0]).expect("name"), "branch-01");
        assert!(issue(&dir, "bad name").is_err());
        let mode = std::fs::metadata(dir.join("branch-01.key"))
            .expect("key")
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}

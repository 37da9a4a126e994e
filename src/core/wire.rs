//! braid's own messages on a lane, besides the IP packets in QUIC DATAGRAM frames.
//!
//! Contract: encoding and checked decoding of the lane hello and its answer. A lane
//! opens a bidirectional QUIC stream, writes one [`Hello`] as JSON and finishes the
//! stream; the exit answers with one [`HelloReply`] as JSON and finishes its side.
//! Messages longer than [`MAX_MESSAGE_LEN`] are refused. The protocol is described in
//! `docs/protocol.md`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::cutoff::CutOff;
use super::lane::Colour;
use super::lane_cc::MAX_DELAY_VARIATION_MS;

/// ALPN protocol id of a braid lane.
pub const ALPN: &[u8] = b"braid/1";
/// Version carried in the hello; the exit refuses versions it does not speak.
/// Version 2 added the flow gap to the datagram header, version 3 the lane sequence
/// number and loss reports, version 4 variation reports.
pub const PROTOCOL_VERSION: u32 = 4;
/// Largest hello or reply accepted.
pub const MAX_MESSAGE_LEN: usize = 4096;
/// Every DATAGRAM frame starts with this many bytes, big-endian: the sender's
/// sequence number for the site (4 bytes), counting every packet it sends to that site
/// on any lane; the flow gap (2 bytes): in the low 15 bits how many numbers back the
/// previous packet of the same flow is, when the receiver must keep the flow in order
/// behind it (a striped flow), or 0, and in the top bit whether the datagram is a
/// copy of one sent before ([`GAP_COPY`]); and the lane sequence number (2 bytes),
/// counting the packets the sender hands to this lane. The receiver resequences and
/// measures reordering with the first two, and reports a lane's lost packets with
/// the third (see [`LossReport`]).
pub const DATAGRAM_HEADER_LEN: usize = 8;
/// The flow gap's top bit: the datagram is a copy of one sent before, over another
/// lane, after its lane lost it or was given up. The receiver does not learn its
/// deadline from a copy that comes after its place was given up: that lateness is
/// the repair's, not the lanes' delay spread.
pub const GAP_COPY: u16 = 0x8000;
/// The largest flow gap a header carries.
pub const MAX_GAP: u16 = GAP_COPY - 1;

/// A probe: a datagram of a header of zeros and no packet. A lane whose answer is
/// overdue sends it so that its peer acknowledges something (QUIC acknowledges every
/// DATAGRAM frame); the receiver counts it and drops it.
pub const PROBE: [u8; DATAGRAM_HEADER_LEN] = [0; DATAGRAM_HEADER_LEN];

/// Zeros to pad a probe with: a probe as long as the packets a lane is opened with
/// (see `engine/warm_up.rs`, `open_lanes`) is a slice of it. More than a datagram over a
/// 1500-byte path holds; over jumbo frames the padding is shorter than the packet.
pub static PROBE_PADDING: [u8; 2048] = [0; 2048];

/// A loss report: a header of zeros, [`LOSS_REPORT_TAG`], the first lane sequence
/// number of a run of packets that did not arrive on the lane it is sent on (2 bytes,
/// big-endian) and how many there were (1 byte). QUIC carries a lane's packets in
/// order and does not resend DATAGRAM frames, so a jump in the lane sequence numbers
/// is a loss; the sender sends those packets again over its other lanes, before the
/// receiver stops waiting for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossReport {
    pub first: u16,
    pub count: u8,
}

/// The byte behind a loss report's header of zeros. Not zero (a padded probe) and
/// no IP version (4 or 6).
pub const LOSS_REPORT_TAG: u8 = 1;
/// The length of a loss report.
pub const LOSS_REPORT_LEN: usize = DATAGRAM_HEADER_LEN + 4;

impl LossReport {
    pub fn encode(self) -> [u8; LOSS_REPORT_LEN] {
        let mut out = [0; LOSS_REPORT_LEN];
        out[DATAGRAM_HEADER_LEN] = LOSS_REPORT_TAG;
        out[DATAGRAM_HEADER_LEN + 1..DATAGRAM_HEADER_LEN + 3]
            .copy_from_slice(&self.first.to_be_bytes());
        out[DATAGRAM_HEADER_LEN + 3] = self.count;
        out
    }

    /// The report a received datagram is, if it is one.
    pub fn decode(datagram: &[u8]) -> Option<LossReport> {
        let (header, body) = datagram.split_first_chunk::<DATAGRAM_HEADER_LEN>()?;
        match *body {
            [LOSS_REPORT_TAG, f0, f1, count] if *header == PROBE => Some(LossReport {
                first: u16::from_be_bytes([f0, f1]),
                count,
            }),
            _ => None,
        }
    }
}

/// A variation report: a header of zeros, [`VARIATION_REPORT_TAG`] and, in
/// microseconds (4 bytes, big-endian), how much the uplink's one-way delay varies
/// each way as the sending end learned it from its own lone packets (0: it learned
/// none). Both ends of a lane measure the same round trip; each takes the larger of
/// its own estimate and its peer's (`core/lane_cc/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VariationReport {
    pub spread: Duration,
}

/// The byte behind a variation report's header of zeros.
pub const VARIATION_REPORT_TAG: u8 = 2;
/// The length of a variation report.
pub const VARIATION_REPORT_LEN: usize = DATAGRAM_HEADER_LEN + 5;

impl VariationReport {
    pub fn encode(self) -> [u8; VARIATION_REPORT_LEN] {
        let micros = u32::try_from(self.spread.as_micros()).unwrap_or(u32::MAX);
        let mut out = [0; VARIATION_REPORT_LEN];
        out[DATAGRAM_HEADER_LEN] = VARIATION_REPORT_TAG;
        out[DATAGRAM_HEADER_LEN + 1..].copy_from_slice(&micros.to_be_bytes());
        out
    }

    /// The report a received datagram is, if it is one.
    pub fn decode(datagram: &[u8]) -> Option<VariationReport> {
        let (header, body) = datagram.split_first_chunk::<DATAGRAM_HEADER_LEN>()?;
        match *body {
            [VARIATION_REPORT_TAG, m0, m1, m2, m3] if *header == PROBE => Some(VariationReport {
                spread: Duration::from_micros(u64::from(u32::from_be_bytes([m0, m1, m2, m3]))),
            }),
            _ => None,
        }
    }
}

/// Whether a received datagram is a probe: a header of zeros, then nothing or zeros.
/// No IP packet starts with a zero byte (its version), so a packet that happens to
/// get sequence number 0 with no flow gap is not taken for one.
pub fn is_probe(datagram: &[u8]) -> bool {
    datagram.len() >= DATAGRAM_HEADER_LEN
        && datagram[..DATAGRAM_HEADER_LEN] == PROBE
        && datagram.get(DATAGRAM_HEADER_LEN).is_none_or(|&b| b == 0)
}

/// The header of a datagram: see [`DATAGRAM_HEADER_LEN`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramHeader {
    pub seq: u32,
    /// 0 to [`MAX_GAP`].
    pub gap: u16,
    pub copy: bool,
    pub lane_seq: u16,
}

/// Writes the datagram header into the first [`DATAGRAM_HEADER_LEN`] bytes of `buf`.
pub fn write_datagram_header(buf: &mut [u8], header: DatagramHeader) {
    buf[..4].copy_from_slice(&header.seq.to_be_bytes());
    let gap = (header.gap & MAX_GAP) | if header.copy { GAP_COPY } else { 0 };
    buf[4..6].copy_from_slice(&gap.to_be_bytes());
    set_lane_seq(buf, header.lane_seq);
}

/// Rewrites the lane sequence number of the datagram in `buf`.
pub fn set_lane_seq(buf: &mut [u8], lane_seq: u16) {
    buf[6..DATAGRAM_HEADER_LEN].copy_from_slice(&lane_seq.to_be_bytes());
}

/// Marks the datagram in `buf` as a copy ([`GAP_COPY`]).
pub fn mark_copy(buf: &mut [u8]) {
    buf[4] |= (GAP_COPY >> 8) as u8;
}

/// What a datagram received on a lane is: a packet behind its header, a probe, a
/// loss report or a variation report. They share the header's room, and a probe's and a report's
/// header of zeros could be a packet's: [`Datagram::parse`] tells them apart in the one
/// order that is right (see [`is_probe`] and [`LossReport`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datagram<'a> {
    /// A packet of the site behind its header (not checked: that is the packet
    /// parser's work).
    Packet {
        header: DatagramHeader,
        packet: &'a [u8],
    },
    /// A probe: it carries nothing for braid.
    Probe,
    LossReport(LossReport),
    VariationReport(VariationReport),
}

impl Datagram<'_> {
    /// What a received datagram is, or `None` when it is shorter than a header.
    pub fn parse(datagram: &[u8]) -> Option<Datagram<'_>> {
        if is_probe(datagram) {
            return Some(Datagram::Probe);
        }
        if let Some(report) = LossReport::decode(datagram) {
            return Some(Datagram::LossReport(report));
        }
        if let Some(report) = VariationReport::decode(datagram) {
            return Some(Datagram::VariationReport(report));
        }
        let (header, packet) = split_datagram(datagram)?;
        Some(Datagram::Packet { header, packet })
    }
}

/// Splits a received datagram into its header and inner packet.
pub fn split_datagram(buf: &[u8]) -> Option<(DatagramHeader, &[u8])> {
    let (header, packet) = buf.split_first_chunk::<DATAGRAM_HEADER_LEN>()?;
    let [s0, s1, s2, s3, g0, g1, l0, l1] = *header;
    let gap = u16::from_be_bytes([g0, g1]);
    let header = DatagramHeader {
        seq: u32::from_be_bytes([s0, s1, s2, s3]),
        gap: gap & MAX_GAP,
        copy: gap & GAP_COPY != 0,
        lane_seq: u16::from_be_bytes([l0, l1]),
    };
    Some((header, packet))
}

/// The first message of a lane, from the entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    pub version: u32,
    /// The site id; must equal the one in the entry's certificate.
    pub site: String,
    /// The uplink's name in the entry's configuration.
    pub uplink: String,
    pub colour: Colour,
    /// The uplink's downstream rate, if known (kbit/s): the exit's weight and shaping.
    #[serde(default)]
    pub down_kbps: Option<u64>,
    /// The uplink's position in the entry's configuration (0 first), so that the exit
    /// ranks the lanes as the entry does (the `single` scheduler).
    #[serde(default)]
    pub rank: u32,
    /// How much the uplink's one-way delay varies by itself (ms), if declared: the
    /// exit's lane lets its delay cap allow it. Left out when not declared, so that an
    /// exit of a build before this field still accepts the hello.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_variation_ms: Option<u64>,
    /// The uplink's tier (1 highest), so that the exit sends on the tier the entry
    /// does, and whether it carries when the better tier is full. Left out at their
    /// defaults (1, no), so that an exit of a build before them still accepts the
    /// hello.
    #[serde(default = "first_tier", skip_serializing_if = "is_first_tier")]
    pub priority: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overflow: bool,
    /// The uplink's quality limits (`uplinks[].max_rtt_ms`, `max_loss_percent` in
    /// hundredths of a percent, `cut_off`), so that the exit cuts its lanes as the
    /// entry does; left out when not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rtt_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_loss_bp: Option<u32>,
    #[serde(default, skip_serializing_if = "is_green")]
    pub cut_off: CutOff,
    /// Not a lane but a watch connection: the entry's lanes are on another exit, and
    /// it only learns whether this one answers (`core::exit_choice`). Left out when
    /// false; an exit of a build before it refuses it, and is then never returned to.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub watch: bool,
}

fn is_green(cut_off: &CutOff) -> bool {
    *cut_off == CutOff::Green
}

/// The longest round trip an uplink's cut-off may allow (ms).
pub const MAX_RTT_LIMIT_MS: u64 = 60_000;

fn first_tier() -> u32 {
    1
}

fn is_first_tier(priority: &u32) -> bool {
    *priority == 1
}

/// The exit's answer to a hello.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum HelloReply {
    Accepted,
    Refused { reason: String },
}

/// Why a message could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("message of {0} bytes is longer than {MAX_MESSAGE_LEN}")]
    TooLong(usize),
    #[error("malformed message: {0}")]
    Malformed(#[from] serde_json::Error),
    #[error("protocol version {0} is not supported (this build speaks {PROTOCOL_VERSION})")]
    Version(u32),
    #[error("invalid {field}: {problem}")]
    Invalid {
        field: &'static str,
        problem: String,
    },
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        // Serialising a struct of strings and integers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(buf: &[u8]) -> Result<Hello, WireError> {
        if buf.len() > MAX_MESSAGE_LEN {
            return Err(WireError::TooLong(buf.len()));
        }
        let hello: Hello = serde_json::from_slice(buf)?;
        if hello.version != PROTOCOL_VERSION {
            return Err(WireError::Version(hello.version));
        }
        check_name("site", &hello.site)?;
        check_name("uplink", &hello.uplink)?;
        if let Some(v) = hello.delay_variation_ms
            && v > MAX_DELAY_VARIATION_MS
        {
            return Err(WireError::Invalid {
                field: "delay_variation_ms",
                problem: format!("{v} ms is more than {MAX_DELAY_VARIATION_MS}"),
            });
        }
        if hello.priority == 0 {
            return Err(WireError::Invalid {
                field: "priority",
                problem: "must be 1 or more".into(),
            });
        }
        if hello
            .max_rtt_ms
            .is_some_and(|ms| ms == 0 || ms > MAX_RTT_LIMIT_MS)
        {
            return Err(WireError::Invalid {
                field: "max_rtt_ms",
                problem: format!("must be 1 to {MAX_RTT_LIMIT_MS}"),
            });
        }
        if hello.max_loss_bp.is_some_and(|bp| bp == 0 || bp > 10_000) {
            return Err(WireError::Invalid {
                field: "max_loss_bp",
                problem: "must be 1 to 10000 (hundredths of a percent)".into(),
            });
        }
        Ok(hello)
    }
}

impl HelloReply {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(buf: &[u8]) -> Result<HelloReply, WireError> {
        if buf.len() > MAX_MESSAGE_LEN {
            return Err(WireError::TooLong(buf.len()));
        }
        Ok(serde_json::from_slice(buf)?)
    }
}

/// Site ids and uplink names: 1 to 63 characters of `[A-Za-z0-9._-]`, so they are valid
/// in certificates, metric labels, file names and log lines alike.
pub fn check_name(field: &'static str, name: &str) -> Result<(), WireError> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > 63 || !name.chars().all(ok_char) {
        return Err(WireError::Invalid {
            field,
            problem: format!("{name:?} is not 1 to 63 characters of A-Z a-z 0-9 . _ -"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_is_a_header_of_zeros_and_nothing_or_zeros_behind_it() {
        assert!(is_probe(&PROBE));
        assert!(is_probe(&PROBE_PADDING[..1200]));
        // A packet that happens to get sequence number 0 and no flow gap.
        let mut packet = vec![0; DATAGRAM_HEADER_LEN];
        packet.extend_from_slice(&[0x45, 0, 0, 20]);
        assert!(!is_probe(&packet));
        assert!(!is_probe(&PROBE[..3]));
    }

    #[test]
    fn hello_round_trips() {
        let h = Hello {
            version: PROTOCOL_VERSION,
            site: "branch-01".into(),
            uplink: "dsl".into(),
            colour: Colour::Blue,
            down_kbps: Some(16_000),
            rank: 2,
            delay_variation_ms: None,
            priority: 1,
            overflow: false,
            max_rtt_ms: None,
            max_loss_bp: None,
            cut_off: CutOff::Green,
            watch: false,
        };
        assert_eq!(Hello::decode(&h.encode()).expect("valid"), h);
        let watch = Hello {
            watch: true,
            ..h.clone()
        };
        assert_eq!(Hello::decode(&watch.encode()).expect("valid"), watch);
        let limited = Hello {
            max_rtt_ms: Some(100),
            max_loss_bp: Some(250),
            cut_off: CutOff::All,
            ..h.clone()
        };
        assert_eq!(Hello::decode(&limited.encode()).expect("valid"), limited);
        let e = Hello::decode(
            &Hello {
                max_loss_bp: Some(20_000),
                ..h.clone()
            }
            .encode(),
        )
        .expect_err("more than all lost");
        assert!(e.to_string().contains("max_loss_bp"), "{e}");
        // The first tier without overflow stays out of the hello too.
        let first = String::from_utf8_lossy(&h.encode()).to_string();
        assert!(
            ["priority", "overflow", "max_", "cut_off", "watch"]
                .iter()
                .all(|k| !first.contains(k)),
            "{first}"
        );
        let backup = Hello {
            priority: 2,
            overflow: true,
            ..h.clone()
        };
        assert_eq!(Hello::decode(&backup.encode()).expect("valid"), backup);
        let zero = Hello {
            priority: 0,
            ..h.clone()
        };
        let e = Hello::decode(&zero.encode()).expect_err("priority 0");
        assert!(e.to_string().contains("priority"), "{e}");
        // Undeclared, the delay variation stays out of the hello: an exit of a build
        // before it refuses unknown fields.
        assert!(!String::from_utf8_lossy(&h.encode()).contains("delay_variation"));
        let varying = Hello {
            delay_variation_ms: Some(20),
            ..h.clone()
        };
        assert_eq!(Hello::decode(&varying.encode()).expect("valid"), varying);
        let wild = Hello {
            delay_variation_ms: Some(5_000),
            ..h
        };
        let e = Hello::decode(&wild.encode()).expect_err("a variation beyond a second");
        assert!(e.to_string().contains("delay_variation_ms"), "{e}");
        let r = HelloReply::Refused {
            reason: "no".into(),
        };
        assert_eq!(HelloReply::decode(&r.encode()).expect("valid"), r);
    }

    #[test]
    fn datagram_headers_round_trip_and_short_datagrams_are_refused() {
        let mut buf = [0u8; 12];
        let header = DatagramHeader {
            seq: 0xdead_beef,
            gap: 0x0102,
            copy: false,
            lane_seq: 0x0304,
        };
        write_datagram_header(&mut buf, header);
        buf[8..].copy_from_slice(b"pkt!");
        assert_eq!(&buf[..8], b"\xde\xad\xbe\xef\x01\x02\x03\x04");
        assert_eq!(split_datagram(&buf), Some((header, &b"pkt!"[..])));
        assert_eq!(split_datagram(&buf[..7]), None);
        set_lane_seq(&mut buf, 0xfffe);
        mark_copy(&mut buf);
        let copy = DatagramHeader {
            copy: true,
            lane_seq: 0xfffe,
            ..header
        };
        assert_eq!(split_datagram(&buf), Some((copy, &b"pkt!"[..])));
        assert_eq!(&buf[4..6], b"\x81\x02", "the flag is the gap's top bit");
    }

    #[test]
    fn a_loss_report_round_trips_and_is_neither_a_probe_nor_a_packet() {
        let report = LossReport {
            first: 0xfff0,
            count: 17,
        };
        let bytes = report.encode();
        assert_eq!(LossReport::decode(&bytes), Some(report));
        assert!(!is_probe(&bytes));
        assert_eq!(LossReport::decode(&PROBE_PADDING[..LOSS_REPORT_LEN]), None);
        assert_eq!(LossReport::decode(&bytes[..LOSS_REPORT_LEN - 1]), None);
        // A packet with sequence number 0 behind a header of zeros is not one.
        let mut packet = bytes;
        packet[DATAGRAM_HEADER_LEN] = 0x45;
        assert_eq!(LossReport::decode(&packet), None);
        let mut not_zeros = bytes;
        not_zeros[3] = 1;
        assert_eq!(LossReport::decode(&not_zeros), None);
    }

    #[test]
    fn a_variation_report_round_trips_and_is_no_other_datagram() {
        let report = VariationReport {
            spread: Duration::from_micros(23_456),
        };
        let bytes = report.encode();
        assert_eq!(VariationReport::decode(&bytes), Some(report));
        assert_eq!(
            Datagram::parse(&bytes),
            Some(Datagram::VariationReport(report))
        );
        assert!(!is_probe(&bytes));
        assert_eq!(LossReport::decode(&bytes), None);
        assert_eq!(
            VariationReport::decode(&bytes[..VARIATION_REPORT_LEN - 1]),
            None
        );
        assert_eq!(
            VariationReport::decode(&LossReport { first: 2, count: 1 }.encode()),
            None
        );
        let mut not_zeros = bytes;
        not_zeros[0] = 1;
        assert_eq!(VariationReport::decode(&not_zeros), None);
        // Beyond what four bytes of microseconds hold: the most they hold.
        let huge = VariationReport {
            spread: Duration::from_secs(10_000),
        };
        assert_eq!(
            VariationReport::decode(&huge.encode()).map(|r| r.spread),
            Some(Duration::from_micros(u64::from(u32::MAX)))
        );
    }

    #[test]
    fn a_datagram_parses_as_a_probe_a_loss_report_or_a_packet() {
        assert_eq!(Datagram::parse(&PROBE), Some(Datagram::Probe));
        assert_eq!(
            Datagram::parse(&PROBE_PADDING[..1200]),
            Some(Datagram::Probe)
        );
        let report = LossReport { first: 7, count: 3 };
        assert_eq!(
            Datagram::parse(&report.encode()),
            Some(Datagram::LossReport(report))
        );
        // A packet with sequence number 0 and no flow gap behind a header of zeros.
        let mut packet = vec![0; DATAGRAM_HEADER_LEN];
        packet.extend_from_slice(&[0x45, 0, 0, 20]);
        let header = DatagramHeader {
            seq: 0,
            gap: 0,
            copy: false,
            lane_seq: 0,
        };
        assert_eq!(
            Datagram::parse(&packet),
            Some(Datagram::Packet {
                header,
                packet: &[0x45, 0, 0, 20]
            })
        );
        assert_eq!(Datagram::parse(&PROBE[..3]), None);
    }

    #[test]
    fn bad_hellos_are_refused_with_a_reason() {
        assert!(matches!(
            Hello::decode(b"\x00garbage"),
            Err(WireError::Malformed(_))
        ));
        assert!(matches!(
            Hello::decode(&[b' '; MAX_MESSAGE_LEN + 1]),
            Err(WireError::TooLong(_))
        ));
        let v1 = br#"{"version":1,"site":"a","uplink":"b","colour":"blue"}"#;
        assert!(matches!(Hello::decode(v1), Err(WireError::Version(1))));
        let v3 = br#"{"version":3,"site":"a","uplink":"b","colour":"blue"}"#;
        assert!(matches!(Hello::decode(v3), Err(WireError::Version(3))));
        let bad = br#"{"version":4,"site":"a b","uplink":"b","colour":"blue"}"#;
        assert!(matches!(
            Hello::decode(bad),
            Err(WireError::Invalid { field: "site", .. })
        ));
    }
}

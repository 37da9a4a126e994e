//! The application classes a controller knows without being told: the pacing paper's
//! five (Section 4), with the utility it measured for each.
//!
//! The values are the paper's measurements as published with it (repository
//! tum-lkn/appaware, `optimization/models/postprocessing/models/`, each model scaled
//! to the 1 to 5 of a mean opinion score), on a coarser grid: ten of its thirty
//! throughputs (one for the terminal and VoIP, which depend on delay alone) and ten of
//! its thirty delays, closer together where delay matters most. The delay is the one
//! the paper's emulator added to the path, taken here as the path's one-way delay.

use super::utility::UtilityFunction;
use crate::core::field_error::FieldError;
use crate::core::lane::Colour;

/// A class of applications and what throughput and delay are worth to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Class {
    pub name: String,
    pub utility: UtilityFunction,
}

/// One measured grid, as published.
struct Measured {
    name: &'static str,
    throughput_kbps: &'static [u32],
    delay_ms: &'static [f64],
    utility: &'static [&'static [f64]],
}

const MEASURED: [Measured; 5] = [
    // Web browsing: page load time (Egger et al.).
    Measured {
        name: "web",
        throughput_kbps: &[100, 1331, 2562, 3793, 5024, 6255, 7486, 8717, 9948, 12000],
        delay_ms: &[
            0.0, 16.6, 33.1, 49.7, 66.2, 82.8, 115.9, 149.0, 182.1, 240.0,
        ],
        utility: &[
            &[1.28, 1.28, 1.28, 1.28, 1.28, 1.28, 1.28, 1.28, 1.28, 1.28],
            &[2.70, 2.70, 2.70, 2.69, 2.69, 2.68, 2.67, 2.66, 2.65, 2.65],
            &[3.29, 3.29, 3.29, 3.28, 3.27, 3.26, 3.25, 3.22, 3.20, 3.18],
            &[3.64, 3.64, 3.64, 3.62, 3.60, 3.59, 3.57, 3.53, 3.48, 3.46],
            &[3.88, 3.88, 3.88, 3.86, 3.83, 3.80, 3.77, 3.72, 3.66, 3.64],
            &[4.06, 4.06, 4.06, 4.03, 4.00, 3.96, 3.92, 3.86, 3.76, 3.73],
            &[4.21, 4.21, 4.21, 4.17, 4.13, 4.10, 4.06, 3.99, 3.85, 3.81],
            &[4.33, 4.33, 4.33, 4.29, 4.25, 4.21, 4.16, 4.06, 3.91, 3.85],
            &[4.43, 4.43, 4.43, 4.38, 4.33, 4.27, 4.22, 4.12, 3.94, 3.89],
            &[4.58, 4.58, 4.58, 4.53, 4.48, 4.42, 4.36, 4.21, 4.03, 3.97],
        ],
    },
    // A file download the user waits for: download time (Egger et al.).
    Measured {
        name: "download",
        throughput_kbps: &[100, 607, 1114, 1621, 2128, 2634, 3141, 3648, 4155, 5000],
        delay_ms: &[
            0.0, 16.6, 33.1, 49.7, 66.2, 82.8, 115.9, 149.0, 182.1, 240.0,
        ],
        utility: &[
            &[1.00, 1.00, 1.00, 1.00, 1.00, 1.00, 1.00, 1.00, 1.00, 1.00],
            &[1.17, 1.10, 1.10, 1.04, 1.00, 1.00, 1.00, 1.00, 1.04, 1.16],
            &[2.23, 2.23, 2.23, 2.19, 2.16, 2.16, 2.16, 2.15, 2.19, 2.22],
            &[2.90, 2.90, 2.90, 2.87, 2.87, 2.87, 2.86, 2.86, 2.85, 2.88],
            &[3.35, 3.35, 3.35, 3.37, 3.37, 3.35, 3.36, 3.35, 3.33, 3.33],
            &[3.72, 3.72, 3.72, 3.74, 3.73, 3.73, 3.72, 3.73, 3.71, 3.69],
            &[4.01, 4.01, 4.02, 4.03, 4.03, 4.04, 4.04, 4.03, 4.00, 3.97],
            &[4.27, 4.27, 4.28, 4.28, 4.28, 4.29, 4.29, 4.26, 4.25, 4.21],
            &[4.48, 4.49, 4.49, 4.49, 4.50, 4.50, 4.49, 4.47, 4.47, 4.41],
            &[4.76, 4.76, 4.76, 4.76, 4.76, 4.76, 4.75, 4.72, 4.72, 4.72],
        ],
    },
    // Remote terminal (SSH): response time (Casas et al.).
    Measured {
        name: "terminal",
        throughput_kbps: &[100],
        delay_ms: &[
            0.0, 34.5, 69.0, 103.4, 137.9, 172.4, 241.4, 310.3, 379.3, 500.0,
        ],
        utility: &[&[5.00, 4.75, 4.25, 4.06, 3.68, 3.33, 2.92, 2.51, 2.10, 1.38]],
    },
    // Adaptive video on demand (DASH): average quality.
    Measured {
        name: "video",
        throughput_kbps: &[750, 1190, 1629, 2069, 2509, 2948, 3388, 3828, 4267, 5000],
        delay_ms: &[
            0.0, 16.6, 33.1, 49.7, 66.2, 82.8, 115.9, 149.0, 182.1, 240.0,
        ],
        utility: &[
            &[1.00, 1.00, 1.00, 1.00, 1.00, 1.00, 1.00, 1.00, 1.00, 1.00],
            &[1.69, 1.69, 1.69, 1.69, 1.62, 1.54, 1.23, 1.00, 1.00, 1.00],
            &[1.98, 2.01, 2.04, 2.04, 2.00, 1.99, 1.92, 1.81, 1.72, 1.66],
            &[2.40, 2.40, 2.40, 2.40, 2.39, 2.38, 2.31, 2.26, 2.22, 2.21],
            &[3.04, 3.04, 3.04, 3.02, 2.99, 2.98, 2.91, 2.85, 2.77, 2.71],
            &[3.66, 3.66, 3.66, 3.64, 3.59, 3.58, 3.48, 3.38, 3.29, 3.24],
            &[4.29, 4.29, 4.29, 4.27, 4.21, 4.18, 4.01, 3.89, 3.80, 3.75],
            &[4.41, 4.41, 4.41, 4.37, 4.33, 4.29, 4.18, 4.09, 4.00, 3.94],
            &[4.48, 4.48, 4.48, 4.47, 4.44, 4.42, 4.32, 4.23, 4.18, 4.18],
            &[4.50, 4.50, 4.50, 4.49, 4.48, 4.47, 4.35, 4.26, 4.21, 4.19],
        ],
    },
    // Voice over IP (G.729.1): delay and loss (Sun et al.).
    Measured {
        name: "voip",
        throughput_kbps: &[100],
        delay_ms: &[
            0.0, 34.5, 69.0, 103.4, 137.9, 172.4, 241.4, 310.3, 379.3, 500.0,
        ],
        utility: &[&[4.94, 4.96, 4.92, 4.80, 4.64, 4.43, 3.91, 3.33, 2.76, 2.01]],
    },
];

/// The colour a default class is given: green (ABE's low delay, at a low rate) for the
/// two whose utility depends on delay alone, the terminal and VoIP; none for the
/// others (the inner DSCP decides).
pub fn default_colour(name: &str) -> Option<Colour> {
    matches!(name, "terminal" | "voip").then_some(Colour::Green)
}

/// The five classes, in the order web, download, terminal, video, voip.
pub fn defaults() -> Result<Vec<Class>, FieldError> {
    MEASURED
        .iter()
        .map(|m| {
            let utility = UtilityFunction::new(
                m.throughput_kbps.iter().map(|&t| f64::from(t)).collect(),
                m.delay_ms.to_vec(),
                m.utility.iter().map(|row| row.to_vec()).collect(),
            )
            .map_err(|e| FieldError::new(format!("{}.{}", m.name, e.path), e.problem))?;
            Ok(Class {
                name: m.name.to_string(),
                utility,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_reach_the_papers_best_utilities() {
        let classes = defaults().unwrap();
        let best = |name: &str, kbps: f64, ms: f64| {
            classes
                .iter()
                .find(|c| c.name == name)
                .unwrap()
                .utility
                .at(kbps, ms)
        };
        // Section 4: the terminal reaches 5 with 100 kbit/s and no delay; VoIP
        // nearly 5 within 34.5 ms; a download 4.8 at 5 Mbit/s; the web 4.6 at
        // 12 Mbit/s.
        assert_eq!(best("terminal", 100.0, 0.0), 5.0);
        assert!(best("voip", 100.0, 34.5) >= 4.9);
        assert!(best("download", 5000.0, 99.3) >= 4.7);
        assert!(best("web", 12000.0, 33.1) >= 4.5);
        // Delay costs the terminal most, a download hardly anything.
        assert!(best("terminal", 100.0, 200.0) < 3.5);
        assert!(best("download", 5000.0, 200.0) >= 4.7);
    }
}

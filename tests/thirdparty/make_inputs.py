"""Regenerate the committed input sets of the third-party models (deterministic; nothing downloaded):

    python -m tests.thirdparty.make_inputs

basic_pitch  2 s clips at 22050 Hz (43844 samples, the model's window): piano-like notes (harmonics 1-6 with
             1/k amplitudes, exponential decay), two-note chords and a rest, at levels 0.05-0.8, plus -60 dB noise.
             inputs/basic_pitch.npz (golden/property inputs), calibration/basic_pitch.npz (int8), disjoint seeds.
nakdimon     Hebrew sentences encoded as nakdimon 0.1.2 encodes them (nakdimon/dataset.py: ids into
             [''] + SPECIAL_TOKENS + VALID_LETTERS, final letters folded to regular ones, zero-padded to 80).
fer          64x64 grey faces drawn from shapes (an oval face, eyes, brows, a mouth curved up or down, lighting
             gradient, sensor noise), scaled as fer/fer.py preprocesses a crop (x / 255 - 0.5) * 2 -> [-1, 1].
pnet         the same faces in colour (a skin tint per channel) at several sizes of its profile (one array per
             size, keyed image@<H>x<W>x3), scaled as mtcnn/utils/images.py normalizes: (x - 127.5) / 128.
"""

from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
SAMPLES, RATE = 43844, 22050

# nakdimon/hebrew.py: SPECIAL_TOKENS + VALID_LETTERS; ids start at 1 (0 is the mask/padding token)
HEBREW = [chr(c) for c in range(0x05D0, 0x05EA + 1)]
TABLE = ["", "H", "O", "5", " ", "!", '"', "'", "(", ")", ",", "-", ".", ":", ";", "?"] + HEBREW
FINALS = dict(zip("ךםןףץ", "כמנפצ"))
SENTENCES = [
    "בראשית ברא אלהים את השמים ואת הארץ.",
    "והארץ היתה תהו ובהו וחשך על פני תהום.",
    "ויאמר אלהים יהי אור ויהי אור.",
    "הילד הלך לבית הספר בבוקר עם אחותו הקטנה.",
    "מחר נלך לים אם מזג האוויר יהיה נעים.",
    "האם ראית את הספר החדש שקניתי אתמול?",
    "הממשלה החליטה להשקיע בתחבורה ציבורית.",
    "שלום, מה שלומך היום?",
    "אני אוהב לקרוא ספרים בערב, ליד החלון.",
    "העיר ירושלים יפה מאוד בשעות הערב.",
    "הוא כתב מכתב ארוך לחבר שלו בחו\"ל.",
    "התלמידים שאלו שאלות רבות במהלך השיעור.",
]


def encode(text, length=80):
    ids = [TABLE.index(FINALS.get(c, c)) for c in text][:length]
    return np.array(ids + [0] * (length - len(ids)), dtype=np.int32)


def note(freq, seconds, level, rng):
    t = np.arange(SAMPLES) / RATE
    env = np.exp(-3.0 * t) * (t < seconds)
    wave = sum(np.sin(2 * np.pi * k * freq * t + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 7))
    return level * env * wave / 2.45  # 2.45: the peak of the harmonic sum above


def clips(seed, count):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        midi = rng.integers(36, 96, size=2)
        freqs = 440.0 * 2.0 ** ((midi - 69) / 12)
        level = float(rng.uniform(0.05, 0.8))
        x = note(freqs[0], rng.uniform(0.3, 2.0), level, rng)
        if i % 3 == 1:  # a chord
            x = x + note(freqs[1], rng.uniform(0.3, 2.0), level, rng)
        if i % 3 == 2:  # a rest, then a later note
            x = np.roll(x, SAMPLES // 2) * (np.arange(SAMPLES) >= SAMPLES // 2)
        x = x + 1e-3 * rng.standard_normal(SAMPLES)
        out.append(np.clip(x, -1.0, 1.0))
    return np.asarray(out, dtype=np.float32)[..., None]


def faces(seed, count, size=64, pixels=False):
    """Synthetic grey face crops in [-1, 1] (fer's preprocessing of 0..255 pixels; ``pixels``: 0..255 as they
    are); ``size``: one side, or (height, width)."""
    rng = np.random.default_rng(seed)
    height, width = (size, size) if np.ndim(size) == 0 else size
    y, x = np.mgrid[0:height, 0:width] / (np.array([height, width])[:, None, None] - 1) * 2 - 1  # [-1, 1] grid
    out = []
    for _ in range(count):
        cx, cy, w, h = rng.normal(0, 0.05), rng.normal(0, 0.05), rng.uniform(0.55, 0.75), rng.uniform(0.7, 0.9)
        img = rng.uniform(40, 120) + 40 * (x * rng.uniform(-1, 1) + y * rng.uniform(-1, 1))  # background light
        face = ((x - cx) / w) ** 2 + ((y - cy) / h) ** 2 < 1
        img = np.where(face, rng.uniform(120, 210) + 30 * x * rng.uniform(-1, 1), img)
        for side in (-1, 1):  # eyes and brows
            ex, ey = cx + side * w * 0.4, cy - h * 0.25
            img = np.where(((x - ex) / 0.09) ** 2 + ((y - ey) / 0.05) ** 2 < 1, rng.uniform(10, 60), img)
            tilt = rng.uniform(-0.3, 0.3) * side
            brow = (np.abs(y - (ey - 0.13 + tilt * (x - ex))) < 0.025) & (np.abs(x - ex) < 0.14)
            img = np.where(brow, rng.uniform(20, 70), img)
        curve, open_ = rng.uniform(-0.6, 0.6), rng.uniform(0.02, 0.12)  # smile (> 0) or frown, mouth opening
        mx = x - cx
        mouth_y = cy + h * 0.45 - curve * (0.3 - mx ** 2 / 0.3) * 0.3
        mouth = (np.abs(y - mouth_y) < open_) & (np.abs(mx) < w * 0.45)
        img = np.where(mouth, rng.uniform(20, 90), img)
        img = np.clip(img + rng.normal(0, 4, img.shape), 0, 255).round()
        out.append(img if pixels else (img / 255.0 - 0.5) * 2.0)
    return np.asarray(out, dtype=np.float32)[..., None]


def colour_faces(seed, count, height, width):
    """``faces`` in RGB (a skin tint per channel, as a camera sees one), normalized as MTCNN feeds PNet."""
    grey = faces(seed, count, (height, width), pixels=True)
    tint = np.random.default_rng(seed + 100).uniform([0.85, 0.7, 0.55], [1.0, 0.85, 0.75], (count, 1, 1, 3))
    return ((grey * tint - 127.5) / 128.0).astype(np.float32)


PNET_SIZES = ((12, 12), (48, 48), (25, 37), (131, 97))  # the profile's min, opt, an odd size between, its max


def pnet_set(seed, count):
    return {f"image@{h}x{w}x3": colour_faces(seed + i, count, h, w) for i, (h, w) in enumerate(PNET_SIZES)}


def main():
    for folder in ("inputs", "calibration"):
        (HERE / folder).mkdir(exist_ok=True)
    np.savez(HERE / "inputs" / "basic_pitch.npz", input_2=clips(1, 6))
    np.savez(HERE / "calibration" / "basic_pitch.npz", input_2=clips(2, 8))
    ids = np.stack([encode(s) for s in SENTENCES])
    np.savez(HERE / "inputs" / "nakdimon.npz", input_1=ids[:8])
    np.savez(HERE / "calibration" / "nakdimon.npz", input_1=ids[8:])
    np.savez(HERE / "inputs" / "fer.npz", input_1=faces(3, 16))
    np.savez(HERE / "calibration" / "fer.npz", input_1=faces(4, 53))
    np.savez(HERE / "inputs" / "pnet.npz", **pnet_set(5, 4))
    np.savez(HERE / "calibration" / "pnet.npz", **pnet_set(15, 8))


if __name__ == "__main__":
    main()

"""Temperature sensors: convert to Fahrenheit, smooth, drop faulty spikes, alert on heat.

Each reading is converted from Celsius to Fahrenheit. A reading more than 18 °F away from its
sensor's moving average (an EWMA with alpha 0.2) is a fault: it is reported and otherwise
ignored. The others update the average, feed each room's 10-minute mean, and raise an alert
when a sensor's average crosses 90 °F (and a note when it falls back). Session windows show
when each sensor was online: a sensor silent for 5 minutes is offline.

    restream replay examples/iot.py --log sample_data/iot/readings.parquet
"""

from restream_kit import emit, minutes, on, state
from restream_kit.windows import ewma, session, tumbling

HOT_F = 90.0
SPIKE_F = 18.0

smooth = ewma(0.2)
hot = state.Map(default=False)  # sensor -> whether its average is above HOT_F
room_avg = tumbling(minutes(10), "mean", table="room_avg_f")
online = session(minutes(5), "count", table="online")


def fahrenheit(celsius):
    return celsius * 9 / 5 + 32


@on("reading")
def convert(e):
    f = fahrenheit(e.celsius)
    online.add(e.sensor)
    expected = smooth.value(e.sensor)
    if expected is not None and abs(f - expected) > SPIKE_F:
        emit("spikes", sensor=e.sensor, fahrenheit=f, expected=round(expected, 2))
    else:
        average = smooth.update(e.sensor, f)
        room_avg.add(e.room, f)
        if (average > HOT_F) != hot[e.sensor]:
            hot[e.sensor] = average > HOT_F
            emit("heat", sensor=e.sensor, room=e.room, hot=average > HOT_F, average=average)

